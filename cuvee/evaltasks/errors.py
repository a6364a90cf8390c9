"""The one error of evaluation tasks: an unknown name, a task file that cannot be read or would run code, a data
file that is missing or undecodable. One line naming the file; ValueError stays a base for callers that catch it."""

from __future__ import annotations

from cuvee.kernel.errors import UserError


class EvalTaskError(UserError, ValueError):
    """An evaluation task or eval file that cannot be used as asked; the message says which file and why."""
