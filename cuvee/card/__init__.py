"""Dataset cards: a Hugging Face README.md (+ HTML + PNG plots) written from a run's stats and mix manifest."""

from cuvee.card.build import CardFiles, write_card

__all__ = ["CardFiles", "write_card"]
