"""Topic tagging and per-topic downsampling (Llama 3 downsampled over-represented arts & entertainment).

``topic`` tags each document with ``metadata["topic"]`` (and ``topic_score``): zero-shot by cosine
similarity between the document embedding and embeddings of short topic descriptions, or, when a
fine-tuned classification head is given (``cuvee classify train --kind transformer`` on topic labels),
by that head, or by any Hugging Face sequence-classification model (``model``: arg-max of its labels).
Zero-shot, sensitive labels (``adult``) must also reach a minimum similarity, else the runner-up topic
wins: plain arg-max called about one in ten news articles "adult". ``topic_sampler`` then keeps each topic at a configured rate, deciding per document by a
hash of (seed, document id) so the choice is reproducible and independent of sharding.
"""

from __future__ import annotations

import numpy as np
import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field, model_validator

from cuvee.pipeline.registry import BuildContext, StageParams, register_stage

# A compact web taxonomy (after WebOrganizer's topic domains); each description is embedded once.
DEFAULT_TOPICS: dict[str, str] = {
    "adult": "adult content, pornography, sex, escorts and erotic material",
    "arts_entertainment": "movies, television, music, celebrities, video games, entertainment news, art and culture",
    "sports": "sports teams, matches, athletes, scores, leagues and fitness",
    "news_politics": "politics, government, elections, current events and world news",
    "business_finance": "business, companies, markets, investing, money, banking and the economy",
    "science_technology": "science, research, physics, biology, chemistry, engineering and technology",
    "computing_software": "software, programming, computers, code, apps, the internet and IT",
    "health_medicine": "health, medicine, diseases, symptoms, treatments, doctors and nutrition",
    "education": "education, schools, universities, courses, learning, teaching and exams",
    "shopping_products": "online shopping, product listings, prices, discounts, reviews of products to buy",
    "travel_places": "travel, tourism, hotels, destinations, cities and geography",
    "food_cooking": "food, recipes, cooking, restaurants and drinks",
    "home_lifestyle": "home, garden, fashion, beauty, relationships, parenting and lifestyle",
    "law_legal": "law, legal rights, courts, regulations, contracts and terms of service",
    "religion_history": "religion, history, philosophy, historical events and biographies",
}


# Zero-shot minimum cosine similarity for sensitive labels: below it the runner-up topic is given instead.
# Plain argmax called 2.8 % of ordinary English web pages "adult" (10.5 % of ScrapingHub news articles;
# their adult similarity: median 0.14, 95th percentile 0.26), while explicit adult pages score 0.36-0.71.
# 0.30 brings ordinary pages down to 0.05 % (1 of 2,162) and keeps 12/12 adult pages: see
# benchmarks/bench_hf_classifier.py --topic-adult.
SENSITIVE_MIN_SIMILARITY: dict[str, float] = {"adult": 0.30}


def guarded_argmax(sims: np.ndarray, labels: list[str], min_similarity: dict[str, float]) -> np.ndarray:
    """Arg-max over labels, where a label in ``min_similarity`` only wins at or above its minimum."""
    masked = sims.copy()
    for lab, m in (min_similarity or {}).items():
        if lab in labels:
            j = labels.index(lab)
            masked[masked[:, j] < m, j] = -np.inf
    return masked.argmax(axis=1)


class _TopicTagger(PipelineStep):
    name = "🏷️ topic"
    type = "🤖 - CLASSIFIER"

    def __init__(self, topics: dict[str, str] | None, head: str | None, encoder: str, batch_size: int,
                 key: str, device: str, max_length: int, min_similarity: dict[str, float] | None = None):
        super().__init__()
        self.min_similarity = dict(SENSITIVE_MIN_SIMILARITY if min_similarity is None else min_similarity)
        self.topics = topics
        self.head = head
        self.encoder_name = encoder
        self.batch_size = batch_size
        self.key = key
        self.device = device
        self.max_length = max_length
        self._labels = None
        self._centroids = None
        self._encoder = None
        self._head = None

    def _setup(self):
        if self._encoder is not None or self._head is not None:
            return
        if self.head:
            from cuvee.classifiers.transformer_model import TransformerScorer

            self._head = TransformerScorer(self.head, positive_label=_first_label(self.head), batch_size=self.batch_size,
                                           device=self.device)
            return
        from cuvee.classifiers.embedder import Encoder

        self._encoder = Encoder(self.encoder_name, max_length=self.max_length, batch_size=self.batch_size, device=self.device)
        topics = self.topics or DEFAULT_TOPICS
        self._labels = list(topics)
        self._centroids = self._encoder.embed([f"{k.replace('_', ' ')}: {v}" for k, v in topics.items()])

    def predict(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        self._setup()
        if self._head is not None:
            return self._head.predict_labels(texts)
        sims = self._encoder.embed(texts) @ self._centroids.T
        best = guarded_argmax(sims, self._labels, self.min_similarity)
        return [self._labels[i] for i in best], sims[np.arange(len(best)), best]

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        batch: list[Document] = []

        def flush():
            with self.track_time("batch"):
                labels, scores = self.predict([d.text for d in batch])
            for d, lab, s in zip(batch, labels, scores):
                d.metadata[self.key] = lab
                d.metadata[f"{self.key}_score"] = float(s)
                self.stat_update(f"{self.key}_{lab}")
                self.stat_update("forwarded")
            return batch

        for doc in data or []:
            self.stat_update("total")
            batch.append(doc)
            if len(batch) >= self.batch_size:
                yield from flush()
                batch = []
        if batch:
            yield from flush()


def _first_label(head_dir: str) -> str:
    import json
    from pathlib import Path

    return json.loads((Path(head_dir) / "head.json").read_text())["labels"][0]


class TopicParams(StageParams):
    topics: dict[str, str] | None = Field(None, description="label -> description for zero-shot; default: a 15-topic web taxonomy")
    head: str | None = Field(None, description="fine-tuned classification head folder (overrides zero-shot)")
    model: str | None = Field(None, description="Hugging Face sequence-classification model (local folder or hub id): "
                                                "arg-max label of config.id2label (overrides zero-shot)")
    encoder: str = Field("all-MiniLM-L6-v2", description="local model folder or hub id")
    key: str = "topic"
    keep: list[str] | None = Field(None, description="keep only documents tagged with these topics; default keep all")

    label_thresholds: dict[str, float] | None = Field(None, description="model only: label -> minimum probability; "
                                                                        "below it the document gets default_label")
    default_label: str = Field("other", description="model only: label given when label_thresholds is not met")
    min_similarity: dict[str, float] | None = Field(None, description="zero-shot: label -> minimum cosine similarity to win, "
                                                                      "else the runner-up is given; default {adult: 0.30} "
                                                                      "(plain arg-max tagged 2.8 % of ordinary pages adult)")
    batch_size: int = Field(64, ge=1)
    max_length: int = Field(256, gt=0)
    device: str = "auto"

    @model_validator(mode="after")
    def _modes(self):
        if self.head and self.model:
            raise ValueError("give head or model, not both")
        if self.label_thresholds and not self.model:
            raise ValueError("label_thresholds needs model (a Hugging Face sequence-classification model)")
        if self.model:
            from cuvee.classifiers import hf_sequence as hf

            named = [k for k in [*(self.label_thresholds or {}), *(self.keep or [])] if k != self.default_label]
            hf.check_options(self.model, require_score=False, labels_needed=named, tagging=True)
        elif self.keep and not self.head:
            known = set(self.topics or DEFAULT_TOPICS)
            if unknown := [k for k in self.keep if k not in known]:
                raise ValueError(f"keep: unknown topics {unknown}; topics: {sorted(known)}")
        return self

    def metadata_fields(self) -> dict[str, str]:
        return {self.key: "string", f"{self.key}_score": "double"}


@register_stage("topic", TopicParams)
def build_topic(p: TopicParams, ctx: BuildContext):
    """Tag each document with a topic (zero-shot from label-description embeddings, a fine-tuned head, or an HF model)."""
    if p.topics is not None and len(p.topics) < 2:
        raise ValueError("topic: give at least two topics")
    if p.model:
        from cuvee.classifiers.hf_sequence import HFLabelTagger, HFSequenceScorer

        scorer = HFSequenceScorer(p.model, batch_size=min(p.batch_size, 64), device=p.device)
        return [HFLabelTagger(scorer, p.key, p.keep, p.label_thresholds, p.default_label, p.batch_size,
                             ctx.exclusion_writer())]
    steps: list = [_TopicTagger(p.topics, p.head, p.encoder, p.batch_size, p.key, p.device, p.max_length, p.min_similarity)]
    if p.keep:
        steps.append(KeepLabels(p.key, p.keep, ctx.exclusion_writer()))
    return steps


class KeepLabels(BaseFilter):
    """Keeps documents whose ``metadata[key]`` is one of ``keep``."""

    name = "🏷️ keep labels"

    def __init__(self, key: str, keep: list[str], exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.key = key
        self.keep = set(keep)

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        lab = doc.metadata.get(self.key)
        return True if lab in self.keep else (False, f"{self.key}_{lab}")


def keep_fraction(doc_id: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, doc id): the same document makes the same choice on every run."""
    return xxhash.xxh64_intdigest(f"{seed}:{doc_id}") / 2**64


class TopicSampler(BaseFilter):
    """Keeps each topic at ``rates[topic]`` (``default_rate`` for unlisted topics)."""

    name = "🎲 topic sampler"

    def __init__(self, rates: dict[str, float], default_rate: float, seed: int, key: str, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.rates = rates
        self.default_rate = default_rate
        self.seed = seed
        self.key = key

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        topic = doc.metadata.get(self.key)
        if topic is None:
            self.stat_update(f"{self.key}_missing")
        rate = self.rates.get(topic, self.default_rate) if topic is not None else self.default_rate
        if keep_fraction(doc.id, self.seed) < rate:
            return True
        return False, f"downsampled_{topic or 'unknown'}"


class TopicSamplerParams(StageParams):
    rates: dict[str, float] = Field(description="topic -> fraction kept, e.g. {arts_entertainment: 0.3}")
    default_rate: float = Field(1.0, ge=0, le=1)
    seed: int = 0
    key: str = "topic"


@register_stage("topic_sampler", TopicSamplerParams)
def build_topic_sampler(p: TopicSamplerParams, ctx: BuildContext):
    """Keep each topic at a configured rate (reproducible per-document hash sampling)."""
    bad = {k: v for k, v in p.rates.items() if not 0 <= v <= 1}
    if bad:
        raise ValueError(f"topic_sampler: rates must be within [0, 1], got {bad}")
    return [TopicSampler(dict(p.rates), p.default_rate, p.seed, p.key, ctx.exclusion_writer())]
