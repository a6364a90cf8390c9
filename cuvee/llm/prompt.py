"""Prompt templates of LLM jobs: a text with one ``{text}`` placeholder, shipped (``cuvee/assets/prompts``) or a
file the user gives; its SHA-256 binds the job's output to the exact instructions sent."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from cuvee.llm.backend import LLMError

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "assets" / "prompts"


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str
    path: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def fill(self, text: str) -> str:
        return self.text.replace("{text}", text)

    def extract(self, prompt: str) -> str | None:
        """The document text inside a filled prompt (for scripted annotators / oracles); None if it does not fit."""
        head, _, tail = self.text.partition("{text}")
        if not (prompt.startswith(head) and prompt.endswith(tail)) or len(prompt) < len(head) + len(tail):
            return None
        return prompt[len(head) : len(prompt) - len(tail)]


def load_prompt(name_or_path: str) -> PromptTemplate:
    """A shipped template by name (``fineweb_edu``) or a template file; leading ``#`` lines are comments."""
    p = Path(name_or_path)
    if not p.is_file():
        shipped = PROMPTS_DIR / f"{name_or_path}.txt"
        if not shipped.is_file():
            names = sorted(f.stem for f in PROMPTS_DIR.glob("*.txt"))
            raise LLMError(f"prompt {name_or_path!r}: not a file and not a shipped template ({', '.join(names)})")
        p = shipped
    lines = p.read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    text = "".join(lines).strip("\n") + "\n"
    if "{text}" not in text:
        raise LLMError(f"prompt {p}: no {{text}} placeholder")
    return PromptTemplate(p.stem, text, str(p))
