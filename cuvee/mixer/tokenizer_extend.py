"""Extend a base tiktoken vocabulary with tokens learned on new (e.g. non-English) text, as Llama 3 did
(100K tiktoken base + 28K tokens for other languages).

How: the new text is pre-tokenized with the base regex and each chunk is encoded with the *base* BPE; BPE
merges are then learned over those base-token sequences and appended as new ranks above every base rank.
Because tiktoken always applies the lowest rank first, the base merges run to completion before any new one,
so every learned token is reachable and base-language text encodes exactly as before (no regression).
The merge learning itself runs in Hugging Face's Rust BPE trainer: each base token id becomes one private
Unicode character, so "words" are base-token strings.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from cuvee.kernel.atomic import write_text

TOKENIZER_TIKTOKEN = "tokenizer.tiktoken"  # the rank file `cuvee tokenizer extend` writes into its folder
_OFFSET = 0x10000  # base token id -> chr(_OFFSET + id): planes 1-2, no whitespace, no surrogates


def read_training_texts(paths: Iterable[str], max_chars: int | None) -> list[str]:
    """Texts from ``.txt`` files (one document per line) or pipeline outputs (Parquet/JSONL, ``text``)."""
    from cuvee.pipeline.io import iter_documents

    out: list[str] = []
    total = 0

    def add(t: str) -> bool:
        nonlocal total
        t = t.strip("\n")
        if t:
            out.append(t)
            total += len(t)
        return max_chars is not None and total >= max_chars

    for p in paths:
        if str(p).endswith(".txt"):
            with open(p, encoding="utf-8") as f:
                for line in f:
                    if add(line):
                        return out
        else:
            for doc in iter_documents([p]):
                if add(doc.text or ""):
                    return out
    return out


def _load_base(base: str):
    from cuvee.mixer.tokenizers import load_tokenizer

    tok = load_tokenizer(base)
    if tok.kind != "tiktoken":
        raise ValueError(f"extend needs a tiktoken base (encoding name or .tiktoken file), got {tok.kind}")
    return tok


def _chunk_words(texts: list[str], enc) -> Iterator[str]:
    """One 'sentence' per text: its base-token chunks, each as a string of id characters, space separated."""
    import regex

    pat = regex.compile(enc._pat_str)
    cache: dict[str, str] = {}
    for text in texts:
        words = []
        for chunk in pat.findall(text):
            w = cache.get(chunk)
            if w is None:
                w = "".join(chr(_OFFSET + t) for t in enc.encode_ordinary(chunk))
                cache[chunk] = w
            if len(w) > 1:  # single-token chunks cannot contribute a merge
                words.append(w)
        yield " ".join(words)


def learn_extension(base_enc, texts: list[str], n_new: int, min_frequency: int = 2) -> list[bytes]:
    """New token byte strings, in merge order (their ranks follow the base's)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    sentences = list(_chunk_words(texts, base_enc))
    alphabet = {ch for s in sentences for ch in s if ch != " "}
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + n_new, min_frequency=min_frequency, show_progress=False,
        initial_alphabet=sorted(alphabet), limit_alphabet=len(alphabet) + 1,
    )
    tok.train_from_iterator(sentences, trainer=trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    id_bytes = {v: k for k, v in base_enc._mergeable_ranks.items()}
    known = set(base_enc._mergeable_ranks)
    new: list[bytes] = []
    for m in merges:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        token = b"".join(id_bytes[ord(ch) - _OFFSET] for ch in a + b)
        if token not in known:
            known.add(token)
            new.append(token)
        if len(new) >= n_new:
            break
    return new


def extend_tiktoken(base: str, texts: list[str], n_new: int, out_path: str | Path, min_frequency: int = 2) -> dict:
    """Write ``out_path`` (.tiktoken rank file) + ``out_path.json`` (pattern, special tokens) and return a summary."""
    if not texts:
        raise ValueError("extend: no training text")
    tok = _load_base(base)
    enc = tok.enc
    new_tokens = learn_extension(enc, texts, n_new, min_frequency)
    ranks = dict(enc._mergeable_ranks)
    next_rank = max([*ranks.values(), *enc._special_tokens.values()]) + 1
    first_new = next_rank
    for t in new_tokens:
        ranks[t] = next_rank
        next_rank += 1
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text(out_path, "".join(f"{base64.b64encode(t).decode()} {r}\n"
                               for t, r in sorted(ranks.items(), key=lambda kv: kv[1])))
    meta = {
        "base": base,
        "pattern": enc._pat_str,
        "special_tokens": dict(enc._special_tokens),
        "base_vocab_size": tok.vocab_size,
        "added_tokens": len(new_tokens),
        "first_new_rank": first_new,
        "training_texts": len(texts),
        "training_chars": sum(len(t) for t in texts),
    }
    write_text(Path(f"{out_path}.json"), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    sample = [t.decode("utf-8", "replace") for t in new_tokens[:20]]
    return {**meta, "path": str(out_path), "vocab_size": next_rank, "examples": sample}
