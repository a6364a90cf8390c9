"""Recipes, the compiler to datatrove jobs, executors, readers / writers and run stats."""

from cuvee.pipeline import console as _console  # noqa: F401  (task processes of a quiet run quiet themselves on import)
