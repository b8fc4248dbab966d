"""Bounded decompression of raw objects: gzip and zstd, every concatenated member or frame.

Output is capped *while* inflating, never after: a decompression bomb allocates at most about `limit`
bytes before it is refused. The content decides the codec (magic bytes); the key's suffix only says what
to expect when the magic bytes are not there.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

import zstandard

from pipeline_project.cleaning.errors import DecompressedTooLargeError, TruncatedArchiveError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# compression suffixes and the codec each names
COMPRESSION_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}

_IN_CHUNK = 64 * 1024
# A zstd block of up to 128 KiB can be encoded in a handful of bytes (an RLE block is 4), so one
# `decompress` call can return about 32768x its input. Feeding at most (room left) / 65536 input bytes
# per call keeps each call's output within the room left (plus at most 64 * 65536 bytes at the very end).
_ZSTD_WORST_RATIO = 1 << 16
_ZSTD_MIN_CHUNK = 64
# the most one step yields, whatever the limit: a bomb never puts more than this in memory at once
_MAX_PIECE = 16 << 20


def codec_of(data: bytes | bytearray, named: str | None) -> str | None:
    """The codec the bytes are in: from their magic bytes, else the one their suffix names, else None."""
    if data[:2] == GZIP_MAGIC:
        return "gzip"
    if data[:4] == ZSTD_MAGIC:
        return "zstd"
    return named


def _too_large(limit: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"inflates past {limit} bytes")


def _pieces(blocks: Iterable[bytes | bytearray | memoryview]) -> Iterator[memoryview]:
    for block in blocks:
        view = memoryview(block)
        for pos in range(0, len(view), _IN_CHUNK):
            yield view[pos : pos + _IN_CHUNK]


def _gunzip(blocks: Iterable, limit: int) -> Iterator[bytes]:
    total, dec, fed = 0, zlib.decompressobj(wbits=31), False
    for chunk in _pieces(blocks):
        while chunk:  # one gzip member per `dec`; a member's end leaves the next one's bytes in unused_data
            fed = True
            out = dec.decompress(chunk, min(limit + 1 - total, _MAX_PIECE))
            total += len(out)
            if total > limit:
                raise _too_large(limit)
            if out:
                yield out
            if dec.eof:
                chunk, dec, fed = dec.unused_data, zlib.decompressobj(wbits=31), False
            else:
                chunk = dec.unconsumed_tail
    if fed and not dec.eof:
        raise TruncatedArchiveError(None)


def _unzstd(blocks: Iterable, limit: int) -> Iterator[bytes]:
    total, dec, fed = 0, zstandard.ZstdDecompressor().decompressobj(), False
    for piece in _pieces(blocks):
        view = memoryview(piece)
        while view:  # one zstd frame per `dec`
            room = min(limit + 1 - total, _MAX_PIECE)
            step = max(_ZSTD_MIN_CHUNK, min(_IN_CHUNK, room // _ZSTD_WORST_RATIO))
            chunk, view = view[:step], view[step:]
            fed = True
            out = dec.decompress(chunk)
            total += len(out)
            if total > limit:
                raise _too_large(limit)
            if out:
                yield out
            if dec.eof:
                view = memoryview(dec.unused_data + bytes(view))
                dec, fed = zstandard.ZstdDecompressor().decompressobj(), False
    if fed and not dec.eof:
        raise TruncatedArchiveError(None)


def inflate_stream(blocks: Iterable[bytes | bytearray | memoryview], codec: str, limit: int) -> Iterator[bytes]:
    """The decompressed bytes of an archive given as a sequence of blocks, piece by piece (at most about 64 KiB
    of input and `_MAX_PIECE` of output per step, so memory holds one piece, not the object).

    Raises, at the point it is found: DecompressedTooLargeError past `limit` output bytes, TruncatedArchiveError
    when the input ends inside a member / frame, and zlib.error / zstandard.ZstdError on corrupt input.
    """
    if codec == "gzip":
        return _gunzip(blocks, limit)
    if codec == "zstd":
        return _unzstd(blocks, limit)
    raise ValueError(f"unknown codec {codec!r}")


def inflate(data: bytes | bytearray, codec: str, limit: int) -> bytearray:
    """All members/frames of `data`, decompressed.

    Raises DecompressedTooLargeError past `limit` output bytes, TruncatedArchiveError (holding what was
    recovered) when the input ends before an end marker, and zlib.error / zstandard.ZstdError on corrupt input.
    """
    out = bytearray()
    try:
        for piece in inflate_stream([data], codec, limit):
            out += piece
    except TruncatedArchiveError:
        raise TruncatedArchiveError(out) from None
    return out
