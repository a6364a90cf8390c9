"""Megatron-LM indexed dataset format (``.bin`` + ``.idx``), written and read without megatron-core.

Why this format: Megatron, NeMo, OLMo-core and GPT-NeoX all stream it, so cuvee's shards train anywhere.

``.idx`` layout (little endian), as documented in megatron/core/datasets/indexed_dataset.py:

    9 bytes   magic  b"MMIDIDX\\x00\\x00"
    <Q        version (1)
    <B        dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
    <Q        sequence count S
    <Q        document count D (= number of documents + 1: the indices start with 0)
    int32[S]  sequence lengths (in tokens)
    int64[S]  sequence pointers (byte offsets into .bin)
    int64[D]  document indices (sequence index where each document starts; last = S)

``.bin`` is the concatenation of every sequence's tokens in that dtype. cuvee writes one sequence per
document, so document boundaries are exactly the sequence boundaries.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES: dict[type, int] = {
    np.uint8: 1,
    np.int8: 2,
    np.int16: 3,
    np.int32: 4,
    np.int64: 5,
    np.float64: 6,
    np.float32: 7,
    np.uint16: 8,
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}


def dtype_for_vocab(vocab_size: int) -> type:
    """uint16 when every token id fits (Megatron's rule), otherwise int32."""
    return np.uint16 if vocab_size <= 65500 else np.int32


class IndexedDatasetWriter:
    """Streams documents (token id arrays) into ``prefix.bin`` and writes ``prefix.idx`` on close."""

    def __init__(self, prefix: str | Path, dtype: type = np.int32):
        if dtype not in DTYPE_CODES:
            raise ValueError(f"unsupported dtype {dtype}")
        self.prefix = Path(prefix)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.dtype = np.dtype(dtype)
        self._bin = open(f"{self.prefix}.bin", "wb")
        self._lengths: list[int] = []
        self.tokens = 0

    def add_document(self, tokens) -> None:
        arr = np.asarray(tokens, dtype=self.dtype)
        self._bin.write(arr.tobytes(order="C"))
        self._lengths.append(int(arr.size))
        self.tokens += int(arr.size)

    def add_documents(self, batch, eos_id: int | None = None) -> None:
        """Many documents in one write (the tokenizer's hot path); ``eos_id`` is appended to each."""
        if not len(batch):
            return
        arrays = [np.asarray(ids) for ids in batch]
        extra = 0 if eos_id is None else 1
        lengths = [a.size + extra for a in arrays]
        flat = np.empty(sum(lengths), dtype=self.dtype)
        pos = 0
        for a, n in zip(arrays, lengths):
            flat[pos : pos + a.size] = a  # one cast+copy per document, straight into the output buffer
            pos += n
            if extra:
                flat[pos - 1] = eos_id
        self._bin.write(flat.tobytes(order="C"))
        self._lengths.extend(lengths)
        self.tokens += int(flat.size)

    @property
    def documents(self) -> int:
        return len(self._lengths)

    def close(self) -> None:
        if self._bin.closed:
            return
        self._bin.close()
        lengths = np.asarray(self._lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        doc_idx = np.arange(len(lengths) + 1, dtype=np.int64)
        with open(f"{self.prefix}.idx", "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<Q", VERSION))
            f.write(struct.pack("<B", DTYPE_CODES[self.dtype.type]))
            f.write(struct.pack("<Q", len(lengths)))
            f.write(struct.pack("<Q", len(doc_idx)))
            f.write(lengths.tobytes(order="C"))
            f.write(pointers.tobytes(order="C"))
            f.write(doc_idx.tobytes(order="C"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class IndexedDataset:
    """Memory-mapped reader: ``ds[i]`` is sequence i as a numpy array, with no copy."""

    def __init__(self, prefix: str | Path):
        self.prefix = Path(prefix)
        with open(f"{self.prefix}.idx", "rb") as f:
            magic = f.read(9)
            if magic != MAGIC:
                raise ValueError(f"{self.prefix}.idx: not a Megatron indexed dataset (bad magic {magic!r})")
            (version,) = struct.unpack("<Q", f.read(8))
            if version != VERSION:
                raise ValueError(f"{self.prefix}.idx: unsupported version {version}")
            (code,) = struct.unpack("<B", f.read(1))
            self.dtype = np.dtype(CODE_DTYPES[code])
            (self._n_seq,) = struct.unpack("<Q", f.read(8))
            (n_doc,) = struct.unpack("<Q", f.read(8))
            offset = f.tell()
        idx = np.memmap(f"{self.prefix}.idx", mode="r", dtype=np.uint8)
        self.sequence_lengths = np.frombuffer(idx, dtype=np.int32, count=self._n_seq, offset=offset)
        offset += self.sequence_lengths.nbytes
        self.sequence_pointers = np.frombuffer(idx, dtype=np.int64, count=self._n_seq, offset=offset)
        offset += self.sequence_pointers.nbytes
        self.document_indices = np.frombuffer(idx, dtype=np.int64, count=n_doc, offset=offset)
        bin_path = Path(f"{self.prefix}.bin")
        self._bin = np.memmap(bin_path, mode="r", dtype=np.uint8) if bin_path.stat().st_size else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return self._n_seq

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``offset:offset+length`` of sequence i (Megatron's ``get`` semantics)."""
        n = int(self.sequence_lengths[i])
        if length is None:
            length = n - offset
        ptr = int(self.sequence_pointers[i]) + offset * self.dtype.itemsize
        return np.frombuffer(self._bin, dtype=self.dtype, count=length, offset=ptr)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.get(i)

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))
