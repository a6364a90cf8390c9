"""Math and code page detection (DeepSeek-style) as a classifier stage that routes documents by domain.

DeepSeekMath / DeepSeek-Coder recall math and code pages from Common Crawl with fastText classifiers
seeded from OpenWebMath / code sites. Without such seed data shipped here, the default scorers are
transparent page-level rules (LaTeX and math symbols; code-shaped lines and keywords) that already
separate obvious pages; pass ``math_model`` / ``code_model`` (fastText, trained with
``cuvee classify train``) to use trained classifiers instead.

The stage writes ``math_score``, ``code_score`` and ``domain`` (``math`` / ``code`` / ``general``);
route outputs with ``output.route_by: domain`` or keep a subset with ``keep``.

With ``model`` (any Hugging Face sequence-classification model loadable by
``AutoModelForSequenceClassification``, e.g. a 26-way web-domain classifier) ``domain`` is the model's
arg-max label and ``domain_score`` its probability; ``label_thresholds`` send low-confidence documents to
``default_label`` and ``keep`` names the model's labels (checked against config.id2label when the recipe
is validated). NVIDIA's ``nvidia/domain-classifier`` is a custom PyTorchModelHubMixin class and cannot be
loaded this way.
"""

from __future__ import annotations

import re

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field, model_validator

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

_LATEX = re.compile(r"\\(?:frac|sum|int|sqrt|alpha|beta|gamma|delta|theta|lambda|sigma|pi|infty|mathbb|mathrm|cdot|leq|geq|neq|partial|begin\{(?:equation|align)|left|right|times|lim|log)\b|\\\(|\\\[")
_MATH_SYM = re.compile(r"[∑∫√≤≥≠±×÷∞∂∇∈∉⊂⊆∀∃≈≡πθλσμ]")
_EQUATION = re.compile(r"(?:\b[a-zA-Z]\s*\^\s*\{?\w+\}?|\b[a-zA-Z]_\{\w+\}|\b[a-zA-Z0-9]\s*[=<>]\s*[-+]?\s*\(?[a-zA-Z0-9]+\s*[-+*/^]\s*[a-zA-Z0-9(])")
_MATH_WORDS = re.compile(r"\b(?:theorem|lemma|proof|corollary|equation|integral|derivative|polynomial|matrix|eigenvalue|"
                         r"vector|prime number|divisible|modulo|probability|variance|hypotenuse|quadratic|logarithm|coefficient|"
                         r"denominator|numerator|solve for)\b", re.IGNORECASE)
_CODE_LINE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import|#include|public |private |static |function\b|return\b|var |let |const |"
    r"if\s*\(|for\s*\(|while\s*\(|}\s*else|\$ |>>> |SELECT |CREATE TABLE|<\?php|<div|<script|@Override|fn |func |package )"
    r"|[;{}]\s*$|^\s*[}\])]+;?\s*$|^\s{2,}\S.*[=(].*[);:]\s*$"
)
_CODE_SYM = re.compile(r"[{}();=<>\[\]]|==|!=|->|=>|::|&&|\|\|")


def math_score(text: str) -> float:
    """Roughly: math markers per word, squashed to [0, 1); ~0.5 at one marker per 25 words."""
    words = max(1, len(text.split()))
    hits = 3 * len(_LATEX.findall(text)) + 2 * len(_MATH_SYM.findall(text)) + len(_EQUATION.findall(text)) + len(_MATH_WORDS.findall(text))
    rate = hits / words * 25
    return float(rate / (1 + rate))


def code_score(text: str) -> float:
    """Share of non-empty lines shaped like code, boosted by code-symbol density; in [0, 1]."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return 0.0
    line_share = sum(1 for ln in lines if _CODE_LINE.search(ln)) / len(lines)
    sym_density = len(_CODE_SYM.findall(text)) / max(1, len(text)) * 20  # ~1 when 5 % of chars are code symbols
    return float(min(1.0, 0.7 * line_share + 0.3 * min(1.0, sym_density)))


class DomainTagger(BaseFilter):
    """Writes math_score / code_score / domain; drops documents whose domain is not in ``keep`` (if given)."""

    name = "🧮 domain"

    def __init__(self, math_threshold: float, code_threshold: float, keep: list[str] | None,
                 math_model: str | None, code_model: str | None, positive_label: str, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.math_threshold = math_threshold
        self.code_threshold = code_threshold
        self.keep = set(keep) if keep else None
        self.math_model = math_model
        self.code_model = code_model
        self.positive_label = positive_label
        self._scorers = None

    def _score(self, text: str) -> tuple[float, float]:
        if self._scorers is None:
            from cuvee.classifiers.fasttext_model import FastTextScorer

            self._scorers = (
                FastTextScorer(self.math_model, self.positive_label) if self.math_model else None,
                FastTextScorer(self.code_model, self.positive_label) if self.code_model else None,
            )
        ms, cs = self._scorers
        m = float(ms.score_batch([text])[0]) if ms else math_score(text)
        c = float(cs.score_batch([text])[0]) if cs else code_score(text)
        return m, c

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        m, c = self._score(doc.text)
        doc.metadata["math_score"] = round(m, 4)
        doc.metadata["code_score"] = round(c, 4)
        candidates = [(m - self.math_threshold, "math"), (c - self.code_threshold, "code")]
        margin, best = max(candidates)
        domain = best if margin >= 0 else "general"
        doc.metadata["domain"] = domain
        self.stat_update(f"domain_{domain}")
        if self.keep is not None and domain not in self.keep:
            return False, f"domain_{domain}"
        return True


class DomainParams(StageParams):
    def metadata_fields(self) -> dict[str, str]:
        return {"domain": "string", "math_score": "double", "code_score": "double"}

    math_threshold: float = Field(0.5, ge=0, le=1)
    code_threshold: float = Field(0.5, ge=0, le=1)
    keep: list[str] | None = Field(None, description="keep only these domains (math, code, general; or the model's labels); "
                                                     "default keep all")
    math_model: str | None = Field(None, description="fastText model for math pages (replaces the rules)")
    code_model: str | None = Field(None, description="fastText model for code pages (replaces the rules)")
    positive_label: str = "hq"
    model: str | None = Field(None, description="Hugging Face sequence-classification model (local folder or hub id): "
                                                "domain = its arg-max label, domain_score = that label's probability")
    label_thresholds: dict[str, float] | None = Field(None, description="model only: label -> minimum probability; "
                                                                        "below it the domain is default_label")
    default_label: str = Field("general", description="model only: domain given when label_thresholds is not met")
    batch_size: int = Field(64, ge=1, description="model only: documents per inference batch")
    device: str = "auto"

    @model_validator(mode="after")
    def _modes(self):
        if self.model:
            if self.math_model or self.code_model:
                raise ValueError("give model or math_model/code_model, not both")
            from cuvee.classifiers import hf_sequence as hf

            named = [k for k in [*(self.label_thresholds or {}), *(self.keep or [])] if k != self.default_label]
            hf.check_options(self.model, require_score=False, labels_needed=named, tagging=True)
        else:
            if self.label_thresholds:
                raise ValueError("label_thresholds needs model (a Hugging Face sequence-classification model)")
            if self.keep and not set(self.keep) <= {"math", "code", "general"}:
                raise ValueError(f"keep must name math, code or general, got {self.keep}")
        return self


@register_stage("domain", DomainParams)
def build_domain(p: DomainParams, ctx: BuildContext):
    """Math / code page detection (rules or fastText), or any HF sequence-classification domain model's arg-max label."""
    if p.model:
        from cuvee.classifiers.hf_sequence import HFLabelTagger, HFSequenceScorer

        scorer = HFSequenceScorer(p.model, batch_size=min(p.batch_size, 64), device=p.device)
        return [HFLabelTagger(scorer, "domain", p.keep, p.label_thresholds, p.default_label, p.batch_size,
                             ctx.exclusion_writer())]
    if p.keep and not set(p.keep) <= {"math", "code", "general"}:
        raise ValueError(f"domain: keep must name math, code or general, got {p.keep}")
    return [DomainTagger(p.math_threshold, p.code_threshold, p.keep, p.math_model, p.code_model, p.positive_label,
                         ctx.exclusion_writer())]


def score_many(texts: list[str]) -> np.ndarray:
    """(math, code) rule scores for many texts, for quick inspection and tests."""
    return np.array([[math_score(t), code_score(t)] for t in texts])
