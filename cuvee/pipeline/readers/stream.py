"""The decompressed bytes of an archive, plain or gzip'd, with the gzip member tracker the framing relies on.

Decompression is zlib per member (a Common Crawl WARC is one member per record): the stream knows where
members start and end, so a record that ends with its member is whole and a corrupt member is skipped
to the next one instead of ending the file.
"""

from __future__ import annotations

import bisect
import zlib
from typing import IO


class Damage(Exception):
    """A damaged stretch of a file; ``reason`` is the drop reason it is counted under."""

    def __init__(self, reason: str, msg: str, member: int = 0):
        super().__init__(msg)
        self.reason = reason
        self.member = member  # compressed offset of the gzip member it is in


class ByteStream:
    """The decompressed bytes of a plain or gzip'd (member-per-record or whole-file) archive, with push-back.

    Knows where gzip members start (compressed offset, for logs and for resynchronising after a corrupt
    member) and end (decompressed offset: a record that ends with its member is complete). Raises
    ``Damage`` for a corrupt member (``corrupt_gzip``), non-gzip bytes between members
    (``malformed_record``) and a file cut inside a member (``truncated_file``).
    """

    CHUNK = 1 << 20

    def __init__(self, raw: IO[bytes], gz: bool):
        self.raw, self.gz = raw, gz
        self.buf = bytearray()
        self.pos = 0  # read position in buf
        self.base = 0  # decompressed offset of buf[0]
        self.eof = False
        self.member_start = 0  # compressed offset of the current gzip member (plain: 0)
        self.member_ends: list[int] = []  # decompressed offsets where gzip members ended (recent ones)
        self.members: list[tuple[int, int]] = []  # (decompressed, compressed) start of recent gzip members
        self.ended: list[tuple[int, int]] = []  # (decompressed, compressed) end of recent gzip members
        self._d = None
        self._rbuf = b""
        self._roff = 0  # compressed offset of _rbuf[0]
        self._raw_eof = False
        self._damage: Damage | None = None  # met while reading ahead: raised when the bytes before it are used up

    @property
    def offset(self) -> int:
        return self.base + self.pos

    @property
    def clean_end(self) -> bool:
        """True when the data ended at a complete gzip member: the file is whole (plain files cannot tell)."""
        return self.gz and self.eof and self._d is None

    def _raw_read(self) -> None:
        # small reads: zlib copies a member's unconsumed input (unused_data) at every member end
        data = self.raw.read(1 << 16)
        if data:
            self._rbuf = self._rbuf + data if self._rbuf else data
        else:
            self._raw_eof = True

    def member_at(self, offset: int) -> int:
        """Compressed offset of the gzip member holding decompressed ``offset`` (plain files: 0)."""
        i = bisect.bisect_right(self.members, (offset, float("inf"))) - 1
        return self.members[i][1] if i >= 0 else 0

    def location(self, start: int, end: int) -> tuple[int, int | None, int]:
        """Where decompressed bytes ``start`` .. ``end`` (one record) lie in the file: (offset, length, skip).

        Plain file: the bytes themselves, skip 0. gzip: ``offset`` is the compressed start of the member holding
        ``start``, ``length`` runs to the compressed end of the member holding the last byte (None when that
        member had not ended yet: a file gzip'd whole, whose members cannot be told apart before its end) and
        ``skip`` is how many decompressed bytes of that member come before ``start`` (0 when every record is its
        own member, as in Common Crawl: the range is then exactly the record's members)."""
        if not self.gz:
            return start, end - start, 0
        i = bisect.bisect_right(self.members, (start, float("inf"))) - 1
        if i < 0:  # its member is no longer tracked (hundreds of members in one record): from the file's start
            return 0, None, start
        dec0, comp0 = self.members[i]
        j = bisect.bisect_left(self.ended, (end, -1))
        return comp0, (self.ended[j][1] - comp0 if j < len(self.ended) else None), start - dec0

    def _more(self) -> bool:
        if self.eof or self._damage is not None:
            return False
        try:
            return self._decompress_more()
        except Damage as e:
            self._damage = e
            return False

    def _check(self) -> None:
        """Out of bytes: raise the damage that stopped the read-ahead, if any."""
        if self._damage is not None:
            raise self._damage

    def _decompress_more(self) -> bool:
        if self.pos > self.CHUNK and self.pos * 2 > len(self.buf):
            del self.buf[: self.pos]
            self.base += self.pos
            self.pos = 0
        if not self.gz:
            data = self.raw.read(self.CHUNK)
            if not data:
                self.eof = True
                return False
            self.buf += data
            return True
        while True:
            if self._d is None:  # at a member start
                while len(self._rbuf) < 3 and not self._raw_eof:
                    self._raw_read()
                if not self._rbuf:
                    self.eof = True
                    return False
                if not self._rbuf.startswith(b"\x1f\x8b\x08"):
                    if not self._rbuf.strip(b"\x00\r\n\t "):  # padding at the end of the file
                        if self._raw_eof:
                            self.eof = True
                            return False
                        self._roff += len(self._rbuf)
                        self._rbuf = b""
                        continue
                    self.member_start = self._roff
                    raise Damage("malformed_record", "bytes that are not a gzip member", self.member_start)
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self.member_start = self._roff
                self.members.append((self.base + len(self.buf), self._roff))
                del self.members[:-256]
            if not self._rbuf:
                self._raw_read()
                if self._raw_eof and not self._rbuf:
                    self.eof = True
                    raise Damage("truncated_file", "gzip member cut short", self.member_start)
            try:
                out = self._d.decompress(self._rbuf, self.CHUNK)
            except zlib.error as e:
                raise Damage("corrupt_gzip", f"gzip member does not decompress: {e}", self.member_start) from None
            rest = self._d.unused_data if self._d.eof else self._d.unconsumed_tail
            self._roff += len(self._rbuf) - len(rest)
            self._rbuf = rest
            if out:
                self.buf += out
            if self._d.eof:
                self._d = None
                self.member_ends.append(self.base + len(self.buf))
                del self.member_ends[:-64]
                self.ended.append((self.base + len(self.buf), self._roff))
                del self.ended[:-256]
            if out:
                return True

    def peek(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n and self._more():
            pass
        return bytes(self.buf[self.pos : self.pos + n])

    def read(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n and self._more():
            pass
        if len(self.buf) - self.pos < n:
            self._check()
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += len(out)
        return out

    def readline(self, limit: int = 1 << 16) -> bytes:
        start = self.pos
        while True:
            i = self.buf.find(b"\n", start, self.pos + limit)
            if i != -1:
                return self.read(i + 1 - self.pos)
            if len(self.buf) - self.pos >= limit:
                return self.read(limit)
            start = len(self.buf)
            if not self._more():
                self._check()
                return self.read(len(self.buf) - self.pos)

    def next_line(self) -> bytes:
        """The next line that is not blank (records are separated by blank lines), b'' at the end."""
        while True:
            line = self.readline()
            if not line or line.strip(b"\r\n\t \x00"):
                return line

    def unread(self, data: bytes) -> None:
        self.buf[: self.pos] = b""
        self.base += self.pos - len(data)
        self.buf[0:0] = data
        self.pos = 0

    def resume_at(self, block: bytes, cand: int) -> None:
        """Continue at ``block + <following bytes>``[cand:] (block was just read)."""
        if cand <= len(block):
            self.unread(block[cand:])
        else:
            self.read(cand - len(block))

    def at_record_end(self, is_start, version, terminator: bytes) -> bool:
        """After a record's declared length: blank bytes, then a record start, the end, or a gzip member end.

        A record followed by its exact ``terminator`` (WARC: CRLFCRLF) and then something else is whole too:
        what follows is an unreadable region of its own. A wrong length lands elsewhere (mid-payload or
        mid-next-record), practically never just before a terminator.
        """
        n = 0
        while True:
            window = self.peek(n + 4096)
            stripped = window[n:].lstrip(b"\r\n")
            n = len(window) - len(stripped)
            if self.gz and self.offset + n in self.member_ends:
                return True
            if stripped or len(window) < n + 4096 or n > 1 << 16:
                break
        if not stripped:
            self._check()
            return len(window) <= n and self.eof
        line = stripped.split(b"\n", 1)[0] + b"\n"
        return is_start(line, version[0]) or window.startswith(terminator)

    def skip_to(self, is_start, version) -> bool:
        """Skip the rest of an unreadable region up to the next line that starts a record."""
        while True:
            line = self.readline()
            if not line:
                return False
            if is_start(line, version[0]):
                self.unread(line)
                return True

    def skip_block(self, length: int, kind: str) -> str | None:
        """Skip a record too large to read; a WARC record end + record start inside it means a wrong length."""
        tail = b""
        while length > 0:
            chunk = self.read(min(length, self.CHUNK))
            if not chunk:
                return "length_mismatch" if self.clean_end else "truncated_file"
            length -= len(chunk)
            if kind == "warc":
                data = tail + chunk
                i = data.find(b"\r\n\r\nWARC/")
                if i != -1 and data[i + 9 : i + 10].isdigit():
                    self.unread(data[i + 4 :])
                    return "length_mismatch"
                tail = data[-16:]
        return None

    def resync(self, is_start, version) -> bool:
        """After a damaged gzip member: continue at the next member that starts a record. False: none left."""
        self.base += len(self.buf)
        self.buf.clear()
        self.pos = 0
        self._d = self._damage = None
        after = self.member_start + 1
        self.raw.seek(after)
        self._rbuf, self._roff, self._raw_eof = b"", after, False
        while True:
            while len(self._rbuf) < self.CHUNK and not self._raw_eof:
                self._raw_read()
            i = self._rbuf.find(b"\x1f\x8b\x08")
            if i == -1:
                if self._raw_eof:
                    self.eof = True
                    return False
                self._roff += len(self._rbuf) - 2
                self._rbuf = self._rbuf[-2:]
                continue
            try:
                head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(self._rbuf[i : i + 65536], 4096)
            except zlib.error:
                head = b""
            line = head.split(b"\n", 1)[0] + b"\n"
            if head and is_start(line, version[0]):
                self._roff += i
                self._rbuf = self._rbuf[i:]
                self.eof = False
                return True
            self._roff += i + 1
            self._rbuf = self._rbuf[i + 1 :]
