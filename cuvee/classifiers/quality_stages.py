"""Recipe stages ``fasttext_quality`` and ``transformer_quality``: score, then keep above a threshold or the top p %.

Both write ``metadata["<name>_score"]``. With ``threshold`` documents scoring below it are dropped;
with ``top_percent`` the cutoff is the corpus-wide quantile (a Barrier, see ``scoring.py``); with
neither, documents are only annotated.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from cuvee.classifiers.scoring import build_score_stage
from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

ASSET_MODELS = Path(__file__).resolve().parent.parent / "assets" / "models"
DEMO_FASTTEXT = ASSET_MODELS / "demo_quality.ftz"


def resolve_model_path(model: str) -> str:
    """``demo`` names the shipped demo classifier; anything else is a path."""
    if model == "demo":
        return str(DEMO_FASTTEXT)
    return model


class _ScoreParams(StageParams):
    threshold: float | None = Field(None, description="keep documents with score >= threshold")
    top_percent: float | None = Field(None, gt=0, le=100, description="keep the corpus-wide top p % (percentile over all shards)")
    batch_size: int = Field(256, ge=1)

    @model_validator(mode="after")
    def _one_mode(self):
        if self.threshold is not None and self.top_percent is not None:
            raise ValueError("give threshold or top_percent, not both")
        return self


class FastTextQualityParams(_ScoreParams):
    model: str = Field("demo", description="path to a fastText .bin/.ftz, or 'demo' for the shipped demo classifier")
    positive_label: str = "hq"
    name: str = Field("fasttext_quality", description="metadata key prefix: <name>_score")
    max_chars: int | None = Field(None, gt=0, description="score only the first N characters (speed on very long pages)")


@register_stage("fasttext_quality", FastTextQualityParams)
def build_fasttext_quality(p: FastTextQualityParams, ctx: BuildContext):
    """fastText quality classifier (DCLM): P(positive label) into metadata, threshold or corpus top-p % filter."""
    from cuvee.classifiers.fasttext_model import FastTextScorer

    path = resolve_model_path(p.model)
    if not Path(path).exists():
        raise FileNotFoundError(f"fasttext_quality: model {path} not found")
    scorer = FastTextScorer(path, p.positive_label, max_chars=p.max_chars)
    return build_score_stage(scorer, p.name, ctx, p.threshold, p.top_percent, p.batch_size)


class TransformerQualityParams(_ScoreParams):
    model: str = Field(description="folder with head.pt + head.json from `cuvee classify train --kind transformer`")
    encoder: str | None = Field(None, description="override the encoder recorded in head.json (local path or hub id)")
    positive_label: str = "hq"
    name: str = Field("transformer_quality", description="metadata key prefix: <name>_score")
    device: str = Field("auto", description="auto = cuda (bf16) when available, else cpu")
    max_length: int | None = Field(None, gt=0, description="tokens per document; default from head.json")
    batch_size: int = Field(64, ge=1)


@register_stage("transformer_quality", TransformerQualityParams)
def build_transformer_quality(p: TransformerQualityParams, ctx: BuildContext):
    """FineWeb-Edu style scorer: frozen encoder + trained head; score into metadata, threshold or top-p % filter."""
    from cuvee.classifiers.transformer_model import TransformerScorer

    scorer = TransformerScorer(p.model, p.positive_label, batch_size=min(p.batch_size, 64), device=p.device,
                               encoder=p.encoder, max_length=p.max_length)
    return build_score_stage(scorer, p.name, ctx, p.threshold, p.top_percent, p.batch_size)
