"""Held-out loss and bits-per-byte, per document, so ablations can bootstrap over documents.

bits-per-byte = (sum of next-token losses in nats) / ln 2 / (UTF-8 bytes of the documents): unlike
per-token loss it compares models across tokenizers. Every token except a document's first is predicted
(the EOS included); bytes are those of the document text (EOS excluded).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
import torch

from cuvee.train.loader import IGNORE_INDEX, PackedLoader
from cuvee.train.shards import ShardSet


@lru_cache(maxsize=4)
def _tiktoken(name: str, fingerprint: str | None = None):
    """The encoding a manifest names; None when it cannot be had offline for sure."""
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except ValueError:
        pass
    # a rank-file tokenizer (e.g. bytes256.tiktoken): the manifest records its name and fingerprint, not its path;
    # the shipped file of that name is used only when it is the very same vocabulary
    from cuvee.mixer import load_tokenizer

    try:
        tok = load_tokenizer(f"{name}.tiktoken")
    except (OSError, ValueError):
        return None
    return tok.enc if fingerprint is not None and tok.fingerprint == fingerprint else None


def _utf8(tokens: np.ndarray, tokenizer: dict) -> bytes | None:
    """A document's UTF-8 bytes decoded from its token ids (EOS left out), or None when the tokenizer kind is unknown
    here (or its decoding fails)."""
    kind, eos = tokenizer.get("kind"), tokenizer.get("eos_id")
    toks = tokens[tokens != eos] if eos is not None else tokens
    if kind == "bytes":
        return bytes(np.asarray(toks, dtype=np.uint8))
    if kind == "tiktoken":
        enc = _tiktoken(tokenizer["name"], tokenizer.get("fingerprint"))
        return None if enc is None else enc.decode_bytes(toks.tolist())
    try:  # other mixer tokenizers (e.g. Hugging Face tokenizer.json): decode, then encode as UTF-8
        return _mixer_tokenizer(json.dumps(tokenizer, sort_keys=True)).decode(toks.tolist()).encode("utf-8")
    except Exception:  # noqa: BLE001 - unknown tokenizer: the caller reports the figure as None
        return None


def document_bytes(tokens: np.ndarray, tokenizer: dict) -> int | None:
    """UTF-8 byte count of a document's text, or None when the tokenizer kind is unknown here (bpb is then None,
    loss still is reported)."""
    raw = _utf8(tokens, tokenizer)
    return None if raw is None else len(raw)


def document_text(tokens: np.ndarray, tokenizer: dict) -> str | None:
    """A document's text decoded from its token ids (invalid UTF-8 replaced), or None when the tokenizer kind is
    unknown here: what the eval hygiene by meaning embeds."""
    raw = _utf8(tokens, tokenizer)
    return None if raw is None else raw.decode("utf-8", "replace")


@lru_cache(maxsize=4)
def _mixer_tokenizer(spec_json: str):
    from cuvee.mixer import load_tokenizer

    spec = json.loads(spec_json)
    return load_tokenizer({k: v for k, v in spec.items() if k in ("kind", "name", "path", "eos")})


@torch.no_grad()
def evaluate(model, shards: ShardSet, seq_len: int, batch_size: int = 8, max_docs: int | None = None,
             backend: str = "sdpa", device: str | torch.device = "cpu", autocast_dtype=None) -> dict:
    """Loss (nats/token) and bpb of ``model`` on the first ``max_docs`` documents of ``shards``."""
    was_training = model.training
    model.eval()
    loader = PackedLoader(shards, seq_len, batch_size, shuffle=False, epochs=1, doc_limit=max_docs,
                          add_eos=shards.eos_id is not None)
    n_docs = loader.num_documents
    doc_nats = np.zeros(n_docs, dtype=np.float64)
    doc_tokens = np.zeros(n_docs, dtype=np.int64)
    for batch in loader:
        ids = batch["input_ids"].to(device)
        labels = batch["labels"].to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            losses = model(ids, batch["position_ids"].to(device), batch["doc_ids"].to(device), labels,
                           backend=backend, reduction="none")
        valid = (labels.view(-1) != IGNORE_INDEX).cpu().numpy()
        docs = batch["doc_index"].view(-1).numpy()[valid]
        np.add.at(doc_nats, docs, losses.float().cpu().numpy()[valid])
        np.add.at(doc_tokens, docs, 1)
    doc_bytes = [document_bytes(np.asarray(shards.document(i)), shards.tokenizer) for i in range(n_docs)]
    model.train(was_training)
    has_bytes = all(b is not None for b in doc_bytes)
    doc_bytes_arr = np.array(doc_bytes if has_bytes else [0] * n_docs, dtype=np.int64)
    total_nats, total_tokens = float(doc_nats.sum()), int(doc_tokens.sum())
    return {
        "documents": n_docs,
        "tokens": total_tokens,
        "loss": total_nats / max(total_tokens, 1),
        "bytes": int(doc_bytes_arr.sum()) if has_bytes else None,
        "bpb": total_nats / math.log(2) / doc_bytes_arr.sum() if has_bytes and doc_bytes_arr.sum() else None,
        "doc_nats": doc_nats,
        "doc_tokens": doc_tokens,
        "doc_bytes": doc_bytes_arr if has_bytes else None,
    }


def public(result: dict) -> dict:
    """The JSON-able summary of an :func:`evaluate` result (per-document arrays dropped)."""
    return {k: v for k, v in result.items() if not k.startswith("doc_")}
