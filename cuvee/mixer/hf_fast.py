"""Run a byte-level BPE ``tokenizer.json`` (GPT-2 / GPT-NeoX family) on tiktoken's faster engine, same ids.

Why: Hugging Face ``tokenizers`` is several times slower than tiktoken on long web documents, and
tokenization dominates the mixer's cost. A byte-level BPE whose token ids grow with merge order is exactly
a tiktoken rank table, so we compile it: vocabulary -> ranks (id = rank), HF's GPT-2 pre-tokenizer regex,
NFC when the file asks for it, and HF's "added tokens" (GPT-NeoX's whitespace runs, PII placeholders) split
out first by leftmost-longest match, as HF does. Anything we cannot reproduce (other normalizers, dropout,
prefixes, merges out of id order) returns ``None``; the caller then keeps the HF engine. The compiled
engine is also checked against HF on a probe text at load time, and on a real corpus in tests/benchmarks.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable

from cuvee.mixer.parallel_encode import buffer_encoder, private_core

# Hugging Face ByteLevel pre-tokenizer regex (tokenizers/src/pre_tokenizers/byte_level.rs)
HF_BYTELEVEL_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

PROBE = (
    "Hello world!  Two  spaces,\tTabs\tand\nnew lines\n\n\n    indented code(x) {return  x**2;}  \r\n"
    "Ünïcödé café naïve — “quotes” 12345 3.14159 e-mail: |||EMAIL_ADDRESS||| <|endoftext|> <|padding|>"
    "中文字符 日本語 한국어 العربية русский ελληνικά 😀👍🏽                                 end   "
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte <-> printable-character map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _is_bytelevel(component: dict | None) -> bool:
    if component is None:
        return False
    if component.get("type") == "ByteLevel":
        return component.get("use_regex", True) and not component.get("add_prefix_space", False)
    return False


def compile_tokenizer_json(path: str):
    """A factory of encoders (``text -> uint32 array``) reproducing the file's ids with tiktoken, or ``None``."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    model = j.get("model") or {}
    if model.get("type") != "BPE" or model.get("dropout") or model.get("continuing_subword_prefix") \
            or model.get("end_of_word_suffix") or model.get("byte_fallback"):
        return None
    if not _is_bytelevel(j.get("pre_tokenizer")):
        return None
    norm = j.get("normalizer")
    if norm is not None and norm.get("type") != "NFC":
        return None
    byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}
    vocab: dict[str, int] = model["vocab"]
    added = {a["content"]: a for a in j.get("added_tokens", [])}
    if any(a.get("single_word") or a.get("lstrip") or a.get("rstrip") for a in added.values()):
        return None
    try:
        ranks = {bytes(byte_decoder[ch] for ch in tok): i for tok, i in vocab.items() if tok not in added}
    except KeyError:
        return None
    # merges must produce ids in increasing order, each above its parts: then rank order == merge order
    last = -1
    for m in model.get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        ia, ib, ic = vocab.get(a), vocab.get(b), vocab.get(a + b)
        if ia is None or ib is None or ic is None or ic <= last or ic <= ia or ic <= ib:
            return None
        last = ic
    # non-special added tokens are matched in the text (leftmost-longest); special ones are treated as text
    # (cuvee sets encode_special_tokens=True on the HF side so documents cannot inject control tokens)
    literal = {c: a["id"] for c, a in added.items() if not a.get("special")}
    splitter = None
    if literal:
        splitter = re.compile("(" + "|".join(re.escape(c) for c in sorted(literal, key=len, reverse=True)) + ")")
    nfc = norm is not None
    name = f"compiled:{path}"

    def make_encode():
        """A fresh engine (its own CoreBPE): one per thread, see parallel_encode."""
        import numpy as np

        plain = buffer_encoder(private_core(ranks, {}, HF_BYTELEVEL_PATTERN, name))

        def encode(text: str):
            if nfc and not unicodedata.is_normalized("NFC", text):
                text = unicodedata.normalize("NFC", text)
            if splitter is None:
                return plain(text)
            parts = splitter.split(text)
            if len(parts) == 1:
                return plain(text)
            out = [np.array([literal[p]], dtype=np.uint32) if k & 1 else plain(p) for k, p in enumerate(parts) if p]
            return np.concatenate(out) if out else np.zeros(0, np.uint32)

        return encode

    return make_encode


def verified_fast_encoder(path: str, hf_encode_batch: Callable, probes: list[str] | None = None):
    """The compiled encoder factory if its engine matches HF on the probe texts, else ``None``."""
    make_encode = compile_tokenizer_json(path)
    if make_encode is None:
        return None
    encode = make_encode()
    probes = probes or [PROBE, PROBE.lower(), PROBE * 3]
    for text, ids in zip(probes, hf_encode_batch(probes)):
        if encode(text).tolist() != list(ids):
            return None
    return make_encode
