"""Recipe stages ``fasttext_quality`` and ``transformer_quality``: score, then keep above a threshold or the top p %.

Both write ``metadata["<name>_score"]``. With ``threshold`` documents scoring below it are dropped;
with ``top_percent`` the cutoff is the corpus-wide quantile (a Barrier, see ``scoring.py``); with
neither, documents are only annotated.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from cuvee.classifiers.scoring import build_score_stage
from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

ASSET_MODELS = Path(__file__).resolve().parent.parent / "assets" / "models"
DEMO_FASTTEXT = ASSET_MODELS / "demo_quality.ftz"
DCLM_STANDIN_FASTTEXT = ASSET_MODELS / "dclm_standin.ftz"  # DCLM-style: curated text vs web text (SOURCE.txt says how)
SHIPPED_FASTTEXT = {"demo": DEMO_FASTTEXT, "dclm_standin": DCLM_STANDIN_FASTTEXT}


def resolve_model_path(model: str) -> str:
    """``demo`` / ``dclm_standin`` name the shipped classifiers (cuvee/assets/models/SOURCE.txt); anything else is a path."""
    return str(SHIPPED_FASTTEXT.get(model, model))


class _ScoreParams(StageParams):
    def metadata_fields(self) -> dict[str, str]:
        from cuvee.classifiers.scoring import score_key

        out = {score_key(self.name): "double"}
        if getattr(self, "int_score", False) or getattr(self, "min_int_score", None) is not None:
            out[f"{self.name.removesuffix('_score')}_int_score"] = "int64"
        if getattr(self, "label_to", None):
            out[self.label_to] = "string"
        return out

    threshold: float | None = Field(None, description="keep documents with score >= threshold")
    top_percent: float | None = Field(None, gt=0, le=100, description="keep the corpus-wide top p % (percentile over all shards)")
    batch_size: int = Field(256, ge=1)

    @model_validator(mode="after")
    def _one_mode(self):
        if self.threshold is not None and self.top_percent is not None:
            raise ValueError("give threshold or top_percent, not both")
        return self


class FastTextQualityParams(_ScoreParams):
    model: str = Field("demo", description="path to a fastText .bin/.ftz, or a shipped one: 'demo' (main content vs "
                                           "boilerplate), 'dclm_standin' (DCLM-style: curated text vs web text)")
    positive_label: str = Field("hq", description="score = P(this label); bare ('hq', '1') or full ('__label__hq'); any "
                                                  "label of the model (DCLM's fastText: hq vs cc; checked when the recipe is built)")
    name: str = Field("fasttext_quality", description="metadata key prefix: <name>_score")
    max_chars: int | None = Field(None, gt=0, description="score only the first N characters (speed on very long pages)")

    @field_validator("positive_label", mode="before")
    @classmethod
    def _label_str(cls, v):
        # YAML reads `positive_label: 1` as an int
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


@register_stage("fasttext_quality", FastTextQualityParams)
def build_fasttext_quality(p: FastTextQualityParams, ctx: BuildContext):
    """fastText quality classifier (DCLM): P(positive label) into metadata, threshold or corpus top-p % filter."""
    from cuvee.classifiers.fasttext_model import FastTextScorer

    path = resolve_model_path(p.model)
    if not Path(path).exists():
        raise FileNotFoundError(f"fasttext_quality: model {path} not found")
    scorer = FastTextScorer(path, p.positive_label, max_chars=p.max_chars)
    scorer.labels()  # load now: a positive_label the model lacks fails at build time, listing the model's labels
    return build_score_stage(scorer, p.name, ctx, p.threshold, p.top_percent, p.batch_size)


class TransformerQualityParams(_ScoreParams):
    model: str = Field(description="cuvee head folder (head.pt + head.json from `cuvee classify train --kind transformer`), "
                                   "or a Hugging Face sequence-classification model: local folder or hub id "
                                   "(e.g. HuggingFaceFW/fineweb-edu-classifier)")
    encoder: str | None = Field(None, description="head folders only: override the encoder recorded in head.json")
    positive_label: str | None = Field(None, description="classification: score = P(this label); default 'hq' for head "
                                                         "folders; for HF models one of config.id2label")
    label_to: str | None = Field(None, description="HF multi-class models: write the arg-max label name into this metadata key")
    int_score: bool = Field(False, description="HF regression models: also write FineWeb-Edu's "
                                               "int(round(clamp(score, 0, 5))) as <name>_int_score")
    min_int_score: int | None = Field(None, description="keep documents with <name>_int_score >= N (FineWeb-Edu: 3); implies int_score")
    name: str = Field("transformer_quality", description="metadata key prefix: <name>_score")
    device: str = Field("auto", description="auto = cuda (bf16) when available, else cpu")
    max_length: int | None = Field(None, gt=0, description="tokens per document; default from head.json, or the HF "
                                                           "tokenizer's model_max_length capped by the position embeddings")
    threads: int | None = Field(None, ge=1, description="torch CPU threads per worker (more CPU throughput: more "
                                                        "executor workers with threads: 1)")
    batch_size: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _hf_options(self):
        from cuvee.classifiers import hf_sequence as hf

        if self.min_int_score is not None and (self.threshold is not None or self.top_percent is not None):
            raise ValueError("give min_int_score, threshold or top_percent, not several")
        if hf.is_hf_sequence_model(self.model):
            if self.encoder is not None:
                raise ValueError("encoder applies to cuvee head folders, not to a Hugging Face sequence-classification model")
            hf.check_options(self.model, self.positive_label, self.label_to, self.int_score or self.min_int_score is not None)
        elif self.label_to or self.int_score or self.min_int_score is not None:
            raise ValueError("label_to / int_score / min_int_score need a Hugging Face sequence-classification model")
        return self


@register_stage("transformer_quality", TransformerQualityParams)
def build_transformer_quality(p: TransformerQualityParams, ctx: BuildContext):
    """Transformer scorer: any HF sequence-classification model (e.g. FineWeb-Edu's), or a frozen encoder + trained head."""
    from cuvee.classifiers import hf_sequence as hf

    if hf.is_hf_sequence_model(p.model):
        use_int = p.int_score or p.min_int_score is not None
        int_key = f"{p.name.removesuffix('_score')}_int_score"
        scorer = hf.HFSequenceScorer(p.model, p.positive_label, label_to=p.label_to, int_score=use_int,
                                     max_length=p.max_length, batch_size=min(p.batch_size, 64), device=p.device,
                                     threads=p.threads, int_key=int_key)
        built = build_score_stage(scorer, p.name, ctx, p.threshold, p.top_percent, p.batch_size, annotator=hf.HFScoreAnnotator)
        if p.min_int_score is not None:
            from cuvee.classifiers.scoring import ScoreThresholdFilter

            built.append(ScoreThresholdFilter(int_key, threshold=p.min_int_score, reason=f"{p.name}_below_min_int_score",
                                              exclusion_writer=ctx.exclusion_writer()))
        return built
    if not (Path(p.model) / "head.json").exists():
        raise FileNotFoundError(f"transformer_quality: {p.model} is neither a cuvee head folder (head.json) nor a Hugging Face "
                                f"sequence-classification model (config.json with a *ForSequenceClassification architecture)")
    from cuvee.classifiers.transformer_model import TransformerScorer

    scorer = TransformerScorer(p.model, p.positive_label or "hq", batch_size=min(p.batch_size, 64), device=p.device,
                               encoder=p.encoder, max_length=p.max_length, threads=p.threads)
    return build_score_stage(scorer, p.name, ctx, p.threshold, p.top_percent, p.batch_size)
