"""File objects over an object's pieces, for the libraries that read files (warcio, tarfile, zipfile, pyarrow):
a forward-only one that holds one piece, and a seekable spooled copy for the formats indexed at their end."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable, Iterator

# a spooled copy stays in memory up to this size, then moves to a temporary file
SPOOL_IN_MEMORY = 16 << 20
BUFFER = 1 << 20


class StreamCut(Exception):
    """The bytes of an archive member stopped being readable: `reason` and `detail` say why (a cut tar, a zip
    member whose CRC does not match). `readers._accounted` lets it through to the archive's reader."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class PiecesIO(io.RawIOBase):
    """A readable, forward-only file over an iterable of byte pieces; memory holds one piece."""

    def __init__(self, pieces: Iterable[bytes | bytearray | memoryview]):
        self._it: Iterator = iter(pieces)
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            piece = next(self._it, None)
            if piece is None:
                return 0
            self._buf = memoryview(piece).cast("B")
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def reader_over(pieces: Iterable[bytes | bytearray | memoryview]) -> io.BufferedReader:
    """A buffered, forward-only file over `pieces`."""
    return io.BufferedReader(PiecesIO(pieces), BUFFER)


def spool(pieces: Iterable[bytes | bytearray | memoryview]) -> tempfile.SpooledTemporaryFile:
    """A seekable copy of `pieces` (in memory up to SPOOL_IN_MEMORY, then on disk), at position 0. The caller
    closes it; the object size limit is the caller's (`_stream_failures`)."""
    f = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - returned open, for `with`
    try:
        for piece in pieces:
            f.write(piece)
    except BaseException:
        f.close()
        raise
    f.seek(0)
    return f


def member_blocks(f, what: str, errors: tuple[type[BaseException], ...]) -> Iterator[bytes]:
    """The bytes of an archive member, a block at a time; a read that fails with one of `errors` becomes a
    StreamCut (`truncated_archive` for an end of data, else `corrupt_archive`)."""
    while True:
        try:
            block = f.read(BUFFER)
        except errors as exc:
            text = str(exc)
            cut = isinstance(exc, EOFError) or "unexpected end" in text
            raise StreamCut("truncated_archive" if cut else "corrupt_archive", f"{what}: {text}"[:150]) from exc
        if not block:
            return
        yield block
