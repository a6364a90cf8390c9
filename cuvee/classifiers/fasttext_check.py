"""Check a fastText model file's structure before ``fasttext.load_model`` sees it.

fastText's loader trusts every size it reads: a truncated or corrupt ``.bin`` makes it allocate whatever
the bytes at the cut say (a 2-minute climb to 8.6 GB, then ``std::bad_alloc``). :func:`check_model_file`
walks the format (magic and version, args, dictionary, input and output matrices, dense or quantized)
reading only headers and seeking over the payloads, and refuses in one line any file whose declared sizes
do not add up to the file's real length. A few hundred KB are read even for a multi-GB model.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from cuvee.kernel.errors import UserError

MAGIC = 793712314
VERSIONS = (11, 12)
KSUB = 256  # centroids per product-quantizer sub-space
MAX_DIM = 1 << 16


class FastTextFileError(UserError, ValueError):
    """The file is not a complete fastText model; the message names it and says what is wrong."""


class _Reader:
    def __init__(self, f, size: int, path: str):
        self.f, self.size, self.path = f, size, path

    def fail(self, what: str):
        raise FastTextFileError(f"{self.path}: not a complete fastText model ({what}; the file has {self.size:,} "
                                "bytes): truncated or corrupt, re-download or retrain it")

    def take(self, n: int, what: str) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            self.fail(f"ends inside {what}")
        return data

    def ints(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.f.tell() + n > self.size:
            self.fail(f"{what} declares {n:,} bytes past the end")
        self.f.seek(n, os.SEEK_CUR)

    def word(self, limit: int = 1 << 16) -> None:
        """A NUL-terminated dictionary entry, then its count (int64) and type (int8)."""
        buf = b""
        while True:
            chunk = self.f.read(256)
            if not chunk:
                self.fail("ends inside the dictionary")
            nul = chunk.find(b"\0")
            if nul >= 0:
                self.f.seek(nul + 1 - len(chunk), os.SEEK_CUR)
                break
            buf += chunk
            if len(buf) > limit:
                self.fail("a dictionary word longer than 64 KB")
        self.take(9, "the dictionary")


def _matrix(r: _Reader, quantized: bool, what: str) -> None:
    if not quantized:
        m, n = r.ints("qq", what)
        if m < 0 or n < 0 or n > MAX_DIM:
            r.fail(f"{what} has impossible shape {m} x {n}")
        r.skip(4 * m * n, what)
        return
    (qnorm,) = r.ints("?", what)
    m, n, codesize = r.ints("qqi", what)
    if m < 0 or n < 0 or codesize < 0:
        r.fail(f"{what} has impossible sizes")
    r.skip(codesize, what)
    _quantizer(r, what)
    if qnorm:
        r.skip(m, what)
        _quantizer(r, what)


def _quantizer(r: _Reader, what: str) -> None:
    dim, nsubq, dsub, lastdsub = r.ints("iiii", what)
    if not (0 < dim <= MAX_DIM and 0 < nsubq <= dim and dsub >= 0 and lastdsub >= 0):
        r.fail(f"{what} has an impossible product quantizer")
    r.skip(4 * dim * KSUB, what)


def check_model_file(path: str | Path) -> None:
    """Raise FastTextFileError unless ``path`` is a structurally complete fastText model file."""
    path = str(path)
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")  # closed below; the reader keeps it open across helpers
    except OSError as e:
        raise FastTextFileError(f"{path}: cannot read fastText model: {e.strerror or e}") from None
    with f:
        r = _Reader(f, size, path)
        magic, version = r.ints("ii", "the header")
        if magic != MAGIC:
            r.fail("wrong magic number: not a fastText .bin/.ftz")
        if version not in VERSIONS:
            r.fail(f"unsupported format version {version}")
        args = r.ints("12id", "the model arguments")
        dim = args[0]
        if not 0 < dim <= MAX_DIM:
            r.fail(f"impossible dimension {dim}")
        nentries, nwords, nlabels, _ntokens, prune = r.ints("iiiqq", "the dictionary header")
        if nentries < 0 or nwords < 0 or nlabels < 0 or nwords + nlabels != nentries or prune < -1:
            r.fail("an impossible dictionary header")
        if nentries * 10 > size:  # every entry takes at least 10 bytes
            r.fail(f"a dictionary of {nentries:,} entries")
        for _ in range(nentries):
            r.word()
        r.skip(8 * max(prune, 0), "the pruned index")
        (quant_input,) = r.ints("?", "the input matrix flag")
        _matrix(r, quant_input, "the input matrix")
        (qout,) = r.ints("?", "the output matrix flag")
        _matrix(r, qout, "the output matrix")
        if f.tell() != size:
            r.fail(f"{size - f.tell():,} unexpected bytes after the output matrix")
