"""Recipe stage ``perplexity``: ccNet-style scoring of every document with a small reference LM.

ccNet (Wenzek et al. 2019) trains a small language model on a high-quality reference corpus (Wikipedia),
scores each document's perplexity under it and splits the corpus into *head* / *middle* / *tail* by the
33rd / 66th percentiles of that score, computed over the corpus (per language). Here:

* the model is a ``cuvee train`` output folder (latest ``checkpoints/step_*.pt``: weights, model config and
  the tokenizer recorded by the mixer, loaded with ``weights_only=True``) or an exported Hugging Face causal
  LM folder (``config.json`` + weights; tokenizer from ``cuvee_tokenizer.json`` or the folder's own files);
* the score is **bits per byte** of the document text, as in ``cuvee.train.evaluate``: the document's tokens
  plus EOS, every token except the first predicted (EOS included), nats summed, / ln 2 / UTF-8 bytes of the
  text. It is written to ``metadata["<name>_score"]`` (lower = more like the reference corpus);
* a document longer than the context window is cut into consecutive windows of ``window`` tokens (the
  training ``seq_len`` of a cuvee run, ``max_position_embeddings`` of an HF model), each window starting at
  position 0 with the previous window out of reach - exactly how the packed training loader saw long
  documents. The first token of a window is still predicted, from the last token of the previous one. A
  document's windows are fixed by the document alone, so its score does not depend on its batch neighbours;
* cuvee models run on packed rows (several windows per row, document-masked attention, positions restart at
  every window); HF models run one window per row, right-padded;
* ``max_chars`` / ``max_tokens`` score only a prefix; a cut document gets no EOS (it did not end there) and
  its bytes are the bytes of the scored prefix;
* buckets (``<name>_bucket``: head / middle / tail) come from percentiles of the scores of the *whole corpus*
  across all shards (optionally per ``group_by`` metadata value, e.g. ``language``), so the stage is a
  :class:`~cuvee.pipeline.registry.Barrier` like ``top_percent`` in ``scoring.py``: the annotator saves each
  rank's scores, a phase merges them and writes the cutoffs, the bucket step after the barrier reads them.
  Lower bpb = head. ``keep: [head, middle]`` drops the rest with reason ``<name>_<bucket>``; ``max_bpb``
  drops documents above an absolute threshold with reason ``<name>_above_max_bpb`` (checked first).

A document with no text has no score (no byte to predict): no ``<name>_score``, bucket ``tail``, and it
fails ``max_bpb``. Nothing is loaded while a recipe is validated: the builder only checks the folder exists.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from pydantic import Field, model_validator

from cuvee.classifiers.scoring import CorpusPhaseStep, save_rank_file, score_key, scored_in_batches
from cuvee.kernel.atomic import write_json
from cuvee.pipeline.registry import Barrier, BuildContext, Phase, StageParams, register_stage

IGNORE_INDEX = -100
REFERENCE_LM = Path(__file__).resolve().parent.parent / "assets" / "models" / "reference_lm"  # `model: reference`
FORWARD_TOKENS = 8192  # tokens per forward pass (rows x window) on CPU; x4 on CUDA


# ---------------------------------------------------------------------------------------------- models


def model_kind(folder: str | Path) -> str:
    """``cuvee`` (a training run folder with checkpoints) or ``hf`` (a causal LM folder with config.json)."""
    folder = Path(folder)
    if (folder / "checkpoints").is_dir() or any(folder.glob("step_*.pt")):
        return "cuvee"
    if (folder / "config.json").is_file() and (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
        from cuvee.hf_loading import refuse_remote_code

        refuse_remote_code(folder)  # at build time: custom model code is refused before any work
        return "hf"
    raise FileNotFoundError(f"{folder}: neither a `cuvee train` output folder (checkpoints/step_*.pt) nor a "
                            "Hugging Face causal LM folder (config.json + weights)")


def _cuvee_tokenizer(spec: dict, override: str | None = None):
    """``encode(texts) -> list[np.ndarray]`` and ``count(ids) -> UTF-8 bytes`` for a tokenizer record."""
    kind = spec.get("kind")
    if kind == "bytes" and override is None:
        from cuvee.train.demo_data import encode_bytes

        return (lambda texts: [encode_bytes(t).astype(np.int64) for t in texts]), (lambda ids: int(len(ids)))
    from cuvee.mixer import load_tokenizer
    from cuvee.mixer.tokenizers import manifest_tokenizer

    if override is None:  # the recorded one (a rank file such as bytes256 is found by name and fingerprint)
        tok = manifest_tokenizer(spec, num_threads=1)
    else:
        tok = load_tokenizer(override, num_threads=1)
        fp = spec.get("fingerprint")
        if fp and getattr(tok, "fingerprint", None) and tok.fingerprint != fp:
            raise ValueError(f"tokenizer {tok.name}: fingerprint {tok.fingerprint[:16]} differs from the one the model "
                             f"was trained with ({fp[:16]})")
    if spec.get("eos_id") is not None and tok.eos_id != spec["eos_id"]:
        raise ValueError(f"tokenizer {tok.name}: eos_id {tok.eos_id} differs from the model's {spec['eos_id']}")
    if tok.kind == "tiktoken":
        return tok.encode_batch_numpy, (lambda ids: len(tok.enc.decode_bytes(list(map(int, ids)))))
    return tok.encode_batch_numpy, (lambda ids: len(tok.decode(list(map(int, ids))).encode("utf-8")))


class _LM:
    """A loaded model: tokenizer, EOS, window and a forward returning per-token NLL (nats)."""

    def __init__(self, folder: str, device: str, tokenizer: str | None = None):
        import torch

        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        self.kind = model_kind(folder)
        if self.kind == "cuvee":
            self._load_cuvee(folder, tokenizer)
        else:
            self._load_hf(folder, tokenizer)
        self.model.eval()

    def _load_cuvee(self, folder: str, tokenizer: str | None):
        from cuvee.train.checkpoint import load_checkpoint, resolve_checkpoint
        from cuvee.train.config import ModelConfig
        from cuvee.train.model import Llama

        self.checkpoint = str(resolve_checkpoint(folder))
        state = load_checkpoint(self.checkpoint)
        mcfg = ModelConfig(**state["model_config"])
        self.model = Llama(mcfg)
        self.model.load_state_dict(state["model"])
        self.model.to(self.device)
        spec = state.get("tokenizer") or {}
        if not spec and tokenizer is None:
            raise ValueError(f"{self.checkpoint}: no tokenizer recorded; give the stage's `tokenizer`")
        self.encode, self.count_bytes = _cuvee_tokenizer(spec, tokenizer)
        self.eos_id = spec.get("eos_id")
        if self.eos_id is None and tokenizer is not None:
            from cuvee.mixer import load_tokenizer

            self.eos_id = load_tokenizer(tokenizer).eos_id
        seq_len = ((state.get("config") or {}).get("data") or {}).get("seq_len") or mcfg.max_seq_len
        self.window = int(min(seq_len, mcfg.max_seq_len))  # positions the model was trained on
        self.params = sum(p.numel() for p in self.model.parameters())

    def _load_hf(self, folder: str, tokenizer: str | None):
        import torch
        from transformers import AutoModelForCausalLM

        from cuvee.hf_loading import pretrained

        self.checkpoint = str(folder)
        self.model = pretrained(AutoModelForCausalLM, folder, dtype=torch.float32).to(self.device)
        cuvee_tok = Path(folder) / "cuvee_tokenizer.json"
        if tokenizer is not None or cuvee_tok.exists():
            spec = json.loads(cuvee_tok.read_text()) if cuvee_tok.exists() else {}
            self.encode, self.count_bytes = _cuvee_tokenizer(spec, tokenizer)
            self.eos_id = spec.get("eos_id")
            if self.eos_id is None:
                from cuvee.mixer import load_tokenizer

                self.eos_id = load_tokenizer(tokenizer).eos_id
        else:
            from transformers import AutoTokenizer

            tok = pretrained(AutoTokenizer, folder)
            self.encode = lambda texts: [np.asarray(ids, dtype=np.int64)
                                         for ids in tok(list(texts), add_special_tokens=False)["input_ids"]]
            self.count_bytes = lambda ids: len(tok.decode(list(map(int, ids))).encode("utf-8"))
            self.eos_id = tok.eos_token_id if tok.eos_token_id is not None else self.model.config.eos_token_id
        self.window = int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)
        self.params = sum(p.numel() for p in self.model.parameters())


def document_windows(ids: np.ndarray, window: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(inputs, labels) of each window of one document's tokens: labels are the next tokens of the document
    (the first token of the next window included), so every token but the first is predicted once."""
    n = len(ids)
    # the document's last token predicts nothing, so it is never fed (causal: no other logit changes)
    return [(ids[s : min(s + window, n - 1)], ids[s + 1 : min(s + window, n - 1) + 1].astype(np.int64))
            for s in range(0, max(n - 1, 0), window)]


class PerplexityScorer:
    """Bits per byte of each text under a reference LM; picklable, loads the model on first use."""

    def __init__(self, model: str, device: str = "auto", max_chars: int | None = None, max_tokens: int | None = None,
                 tokenizer: str | None = None, forward_tokens: int | None = None, threads: int | None = None):
        self.model_path = str(model)
        self.threads = threads
        self.device = device
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.tokenizer = tokenizer
        self.forward_tokens = forward_tokens
        self._lm: _LM | None = None

    def __getstate__(self):
        return {**self.__dict__, "_lm": None}

    def load(self) -> _LM:
        if self._lm is None:
            if self.threads:  # as the transformer stages: intra-op threads of this worker (CPU)
                import torch

                torch.set_num_threads(self.threads)
            self._lm = _LM(self.model_path, self.device, self.tokenizer)
        return self._lm

    def prepare(self, texts: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """Token ids to score (EOS appended to a document scored whole) and the UTF-8 bytes they cover."""
        lm = self.load()
        cut = [t[: self.max_chars] if self.max_chars else t for t in texts]
        ids_list = lm.encode(cut)
        docs, nbytes = [], np.zeros(len(texts), dtype=np.int64)
        for i, (orig, text, ids) in enumerate(zip(texts, cut, ids_list)):
            ids = np.asarray(ids, dtype=np.int64)
            whole = len(text) == len(orig)
            if self.max_tokens is not None and len(ids) > self.max_tokens:
                ids, whole = ids[: self.max_tokens], False
                nbytes[i] = lm.count_bytes(ids)
            else:
                nbytes[i] = len(text.encode("utf-8"))
            if whole and lm.eos_id is not None and len(ids):
                ids = np.append(ids, lm.eos_id)
            docs.append(ids)
        return docs, nbytes

    def score_batch(self, texts: list[str]) -> np.ndarray:
        """bpb per text (NaN for a text with no bytes)."""
        nats = self.nats_batch(texts)
        return nats[0] / math.log(2) / np.where(nats[1] > 0, nats[1], np.nan)

    def nats_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(summed NLL in nats, bytes, predicted tokens) per text."""
        import torch

        lm = self.load()
        docs, nbytes = self.prepare(list(texts))
        nats = np.zeros(len(docs), dtype=np.float64)
        ntok = np.zeros(len(docs), dtype=np.int64)
        segments = [(d, inp, lab) for d, ids in enumerate(docs) for inp, lab in document_windows(ids, lm.window)]
        if not segments:
            return nats, nbytes, ntok
        budget = self.forward_tokens or (FORWARD_TOKENS * (4 if lm.device.type == "cuda" else 1))
        rows_per_forward = max(1, budget // lm.window)
        rows = _pack(segments, lm.window) if lm.kind == "cuvee" else _one_per_row(segments)
        with torch.inference_mode():
            for start in range(0, len(rows), rows_per_forward):
                batch = rows[start : start + rows_per_forward]
                loss, owner = self._forward(lm, batch)
                valid = owner >= 0
                np.add.at(nats, owner[valid], loss[valid])
                np.add.at(ntok, owner[valid], 1)
        return nats, nbytes, ntok

    def _forward(self, lm: _LM, rows: list[list[tuple[int, np.ndarray, np.ndarray]]]) -> tuple[np.ndarray, np.ndarray]:
        """Per-token NLL and the owning document (-1 = nothing to predict) of a list of rows."""
        import torch
        import torch.nn.functional as F

        width = lm.window if lm.kind == "cuvee" else max(sum(len(inp) for _, inp, _ in r) for r in rows)
        b = len(rows)
        ids = np.zeros((b, width), dtype=np.int64)
        labels = np.full((b, width), IGNORE_INDEX, dtype=np.int64)
        pos = np.zeros((b, width), dtype=np.int64)
        seg = np.zeros((b, width), dtype=np.int64)
        owner = np.full((b, width), -1, dtype=np.int64)
        for r, row in enumerate(rows):
            at = 0
            for k, (d, inp, lab) in enumerate(row):
                m = len(inp)
                ids[r, at : at + m], labels[r, at : at + m] = inp, lab
                pos[r, at : at + m], seg[r, at : at + m] = np.arange(m), k
                owner[r, at : at + m] = np.where(lab != IGNORE_INDEX, d, -1)
                at += m
            seg[r, at:] = len(row)  # padding: its own segment, fully ignored
        dev = lm.device

        def t(a):
            return torch.from_numpy(a).to(dev)

        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else _null()
        with autocast:
            if lm.kind == "cuvee":
                logits = lm.model(t(ids), t(pos), t(seg), backend="sdpa")
            else:
                attn = (seg < np.array([[len(r)] for r in rows])).astype(np.int64)
                logits = lm.model(input_ids=t(ids), attention_mask=t(attn)).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), t(labels).reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="none")
        return loss.double().cpu().numpy(), owner.reshape(-1)


def _null():
    from contextlib import nullcontext

    return nullcontext()


def _pack(segments, window: int) -> list[list]:
    """First-fit-decreasing packing of windows into rows of ``window`` tokens (a window never spans rows)."""
    order = sorted(range(len(segments)), key=lambda i: -len(segments[i][1]))
    rows: list[list] = []
    room: list[int] = []
    for i in order:
        n = len(segments[i][1])
        for r, free in enumerate(room):
            if free >= n:
                rows[r].append(segments[i])
                room[r] -= n
                break
        else:
            rows.append([segments[i]])
            room.append(window - n)
    return rows


def _one_per_row(segments) -> list[list]:
    """One window per row, sorted by length so that a forward pads little."""
    return [[s] for s in sorted(segments, key=lambda s: -len(s[1]))]


# ---------------------------------------------------------------------------------------------- buckets


def bucket_names(n_cutoffs: int) -> list[str]:
    """head, (middle...), tail for ``n_cutoffs`` percentile cutoffs."""
    if n_cutoffs == 1:
        return ["head", "tail"]
    if n_cutoffs == 2:
        return ["head", "middle", "tail"]
    return ["head", *[f"middle_{i}" for i in range(1, n_cutoffs)], "tail"]


def bucket_cutoffs(scores: np.ndarray, percentiles: list[float]) -> list[float]:
    """bpb at each percentile (linear interpolation) of the finite ``scores``; +inf when there are none."""
    s = np.asarray(scores, dtype=np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return [math.inf] * len(percentiles)
    return [float(v) for v in np.percentile(s, percentiles)]


def assign_bucket(bpb: float | None, cutoffs: list[float]) -> str:
    """Lower bpb = head: bucket i is the first with ``bpb <= cutoffs[i]``; no score = tail."""
    names = bucket_names(len(cutoffs))
    if bpb is None or not math.isfinite(bpb):
        return names[-1]
    for name, c in zip(names, cutoffs):
        if bpb <= c:
            return name
    return names[-1]


class PerplexityAnnotator(PipelineStep):
    """Scores documents in batches into ``metadata[key]`` and yields every one; with ``scores_dir`` it also
    saves this rank's scores (float64, NaN for unscored) and group labels for the corpus-wide percentiles."""

    name = "🧮 perplexity"
    type = "🤖 - CLASSIFIER"

    def __init__(self, scorer: PerplexityScorer, key: str, batch_size: int = 64, scores_dir: str | None = None,
                 group_by: str | None = None):
        super().__init__()
        self.scorer, self.key, self.batch_size = scorer, key, batch_size
        self.scores_dir, self.group_by = scores_dir, group_by

    def _flush(self, batch: list[Document], scores: list, groups: list):
        with self.track_time("batch"):
            bpb = np.asarray(self.scorer.score_batch([d.text for d in batch]), dtype=np.float64)
        for doc, s in zip(batch, bpb):
            if math.isfinite(s):
                doc.metadata[self.key] = float(s)
            else:
                self.stat_update("unscored_empty")
            if self.group_by:
                groups.append(str(doc.metadata.get(self.group_by)))
        scores.append(bpb)
        self.stat_update("batches")

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        scores: list[np.ndarray] = []
        groups: list[str] = []
        yield from scored_in_batches(self, data, self.batch_size, lambda batch: self._flush(batch, scores, groups))
        if self.scores_dir is not None:
            arr = np.concatenate(scores) if scores else np.zeros(0, dtype=np.float64)
            labels = np.asarray(groups, dtype=str) if self.group_by else np.zeros(0, dtype=str)
            save_rank_file(self.scores_dir, f"{rank:05d}.npz", lambda f: np.savez(f, scores=arr, groups=labels))


class PercentileBuckets(CorpusPhaseStep):
    """Phase step: merge every rank's scores and write the corpus-wide (per-group) bucket cutoffs."""

    name = "📊 perplexity buckets"
    type = "🤖 - CLASSIFIER"

    def __init__(self, scores_dir: str, cutoffs_path: str, percentiles: list[float], expected_ranks: int | None = None,
                 group_by: str | None = None):
        super().__init__()
        self.scores_dir, self.cutoffs_path = scores_dir, cutoffs_path
        self.percentiles, self.expected_ranks, self.group_by = list(percentiles), expected_ranks, group_by

    def compute(self) -> dict:
        files = sorted(Path(self.scores_dir).glob("*.npz"))
        if self.expected_ranks is not None and len(files) != self.expected_ranks:
            raise RuntimeError(f"perplexity buckets: expected scores from {self.expected_ranks} ranks in "
                               f"{self.scores_dir}, found {len(files)}")
        loaded = [np.load(f, allow_pickle=False) for f in files]
        scores = np.concatenate([z["scores"] for z in loaded]) if loaded else np.zeros(0)
        info = {"percentiles": self.percentiles, "buckets": bucket_names(len(self.percentiles)),
                "cutoffs": bucket_cutoffs(scores, self.percentiles), "documents": int(scores.size),
                "scored": int(np.isfinite(scores).sum()), "ranks": len(files), "group_by": self.group_by}
        if self.group_by:
            groups = np.concatenate([z["groups"] for z in loaded]) if loaded else np.zeros(0, dtype=str)
            info["groups"] = {str(g): {"cutoffs": bucket_cutoffs(scores[groups == g], self.percentiles),
                                       "documents": int((groups == g).sum())} for g in np.unique(groups)}
        Path(self.cutoffs_path).parent.mkdir(parents=True, exist_ok=True)
        write_json(self.cutoffs_path, info)
        return info


class PerplexityFilter(BaseFilter):
    """Writes ``<name>_bucket`` (from the cutoffs file) and drops by ``max_bpb`` and ``keep``."""

    name = "🧮 perplexity buckets"

    def __init__(self, key: str, name: str, cutoffs_path: str | None = None, keep: list[str] | None = None,
                 max_bpb: float | None = None, group_by: str | None = None, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.key, self.prefix, self.cutoffs_path = key, name, cutoffs_path
        self.keep = set(keep) if keep else None
        self.max_bpb, self.group_by = max_bpb, group_by
        self._info: dict | None = None

    def _cutoffs(self, doc: Document) -> list[float]:
        if self._info is None:
            p = Path(self.cutoffs_path)
            if not p.exists():
                raise FileNotFoundError(f"{p}: perplexity cutoffs missing; the percentile phase must run before this step")
            self._info = json.loads(p.read_text())
        if self.group_by:
            return self._info["groups"][str(doc.metadata.get(self.group_by))]["cutoffs"]
        return self._info["cutoffs"]

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        bpb = doc.metadata.get(self.key)
        if self.cutoffs_path is not None:
            bucket = assign_bucket(bpb, self._cutoffs(doc))
            doc.metadata[f"{self.prefix}_bucket"] = bucket
            self.stat_update(f"bucket_{bucket}")
        if self.max_bpb is not None and (bpb is None or bpb > self.max_bpb):
            return False, f"{self.prefix}_above_max_bpb"
        if self.keep is not None and doc.metadata[f"{self.prefix}_bucket"] not in self.keep:
            return False, f"{self.prefix}_{doc.metadata[f'{self.prefix}_bucket']}"
        return True


# ---------------------------------------------------------------------------------------------- the stage


class PerplexityParams(StageParams):
    def metadata_fields(self) -> dict[str, str]:
        return {score_key(self.name): "double", f"{self.name}_bucket": "string"}

    model: str = Field(description="a `cuvee train` output folder (latest checkpoint), a Hugging Face causal LM folder, "
                                   "or 'reference': the shipped reference LM (cuvee/assets/models/SOURCE.txt)")
    name: str = Field("perplexity", description="metadata prefix: <name>_score (bits per byte), <name>_bucket")
    tokenizer: str | None = Field(None, description="override the model's tokenizer (tiktoken name, .tiktoken or "
                                                    "tokenizer.json); checked against the recorded fingerprint")
    max_chars: int | None = Field(None, gt=0, description="score only the first N characters")
    max_tokens: int | None = Field(None, gt=1, description="score only the first N tokens")
    batch_size: int = Field(64, ge=1, description="documents per scoring call (packed into rows of the model's window)")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto = cuda (bf16) when available, else cpu")
    threads: int | None = Field(None, ge=1, description="torch CPU threads per worker (default: torch's, every core); "
                                                        "small models score faster with 1 thread and more tasks")
    buckets: list[float] | None = Field([33.3, 66.6], description="corpus-wide bpb percentiles splitting head / middle / "
                                                                 "tail (lower bpb = head); null: no buckets, no barrier")
    group_by: str | None = Field(None, description="compute the percentiles per value of this metadata key (e.g. language)")
    keep: list[str] | None = Field(None, description="buckets to keep, e.g. [head, middle]; others dropped as <name>_<bucket>")
    max_bpb: float | None = Field(None, gt=0, description="drop documents above this bits per byte (<name>_above_max_bpb)")

    @model_validator(mode="after")
    def _check(self):
        if self.buckets is not None:
            b = self.buckets
            if not b or any(not 0 < x < 100 for x in b) or any(x >= y for x, y in zip(b, b[1:])):
                raise ValueError(f"buckets must be strictly increasing percentiles in (0, 100), got {b}")
        if self.keep is not None:
            if self.buckets is None:
                raise ValueError("keep needs buckets")
            names = bucket_names(len(self.buckets))
            bad = [k for k in self.keep if k not in names]
            if bad or not self.keep:
                raise ValueError(f"keep: {bad or self.keep} not among the buckets {names}")
        if self.group_by is not None and self.buckets is None:
            raise ValueError("group_by needs buckets")
        return self


@register_stage("perplexity", PerplexityParams)
def build_perplexity(p: PerplexityParams, ctx: BuildContext):
    """ccNet perplexity: bits per byte under a reference LM, head/middle/tail by corpus-wide percentiles."""
    from cuvee.pipeline.recipe import RecipeError

    where = f"stages[{ctx.stage_index}]({ctx.stage_name}).model"
    model = str(REFERENCE_LM) if p.model == "reference" else p.model
    if not Path(model).is_dir():
        raise RecipeError(f"{where}: {p.model!r} is not a folder; give `model: reference` (the shipped reference LM) "
                          "or train one first, e.g. `cuvee train configs/train/reference_lm.yaml` (its header says how)")
    try:
        model_kind(model)  # a folder listing only: nothing is loaded here
    except FileNotFoundError as e:
        raise RecipeError(f"{where}: {e}") from None
    scorer = PerplexityScorer(model, p.device, p.max_chars, p.max_tokens, p.tokenizer, threads=p.threads)
    key = score_key(p.name)
    if p.buckets is None:
        steps: list = [PerplexityAnnotator(scorer, key, p.batch_size)]
        if p.max_bpb is not None:
            steps.append(PerplexityFilter(key, p.name, max_bpb=p.max_bpb, exclusion_writer=ctx.exclusion_writer()))
        return steps
    scores_dir = str(ctx.stage_dir("scores"))
    cutoffs_path = str(ctx.stage_dir("buckets.json"))
    return Barrier(
        before=[PerplexityAnnotator(scorer, key, p.batch_size, scores_dir=scores_dir, group_by=p.group_by)],
        phases=[Phase(f"{p.name}_buckets", [PercentileBuckets(scores_dir, cutoffs_path, p.buckets, ctx.tasks, p.group_by)],
                      tasks=1)],
        after=[PerplexityFilter(key, p.name, cutoffs_path=cutoffs_path, keep=p.keep, max_bpb=p.max_bpb, group_by=p.group_by,
                                exclusion_writer=ctx.exclusion_writer())],
    )
