"""Bounded decompression of raw objects: gzip and zstd, every concatenated member or frame.

Output is capped *while* inflating, never after: a decompression bomb allocates at most about `limit`
bytes before it is refused. The content decides the codec (magic bytes); the key's suffix only says what
to expect when the magic bytes are not there.
"""

from __future__ import annotations

import zlib

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


def codec_of(data: bytes | bytearray, named: str | None) -> str | None:
    """The codec the bytes are in: from their magic bytes, else the one their suffix names, else None."""
    if data[:2] == GZIP_MAGIC:
        return "gzip"
    if data[:4] == ZSTD_MAGIC:
        return "zstd"
    return named


def _too_large(limit: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"inflates past {limit} bytes")


def _gunzip(data: bytes | bytearray, limit: int) -> bytearray:
    out = bytearray()
    view = memoryview(data)
    pos = 0
    while pos < len(view):  # one gzip member per round
        dec = zlib.decompressobj(wbits=31)
        while not dec.eof and pos < len(view):
            chunk = view[pos : pos + _IN_CHUNK]
            pos += len(chunk)
            while chunk and not dec.eof:
                out += dec.decompress(chunk, limit + 1 - len(out))
                if len(out) > limit:
                    raise _too_large(limit)
                chunk = dec.unconsumed_tail
        if not dec.eof:
            raise TruncatedArchiveError(out)
        pos -= len(dec.unused_data)
    return out


def _unzstd(data: bytes | bytearray, limit: int) -> bytearray:
    out = bytearray()
    view = memoryview(data)
    pos = 0
    while pos < len(view):  # one zstd frame per round
        dec = zstandard.ZstdDecompressor().decompressobj()
        while not dec.eof and pos < len(view):
            step = max(_ZSTD_MIN_CHUNK, min(_IN_CHUNK, (limit + 1 - len(out)) // _ZSTD_WORST_RATIO))
            chunk = view[pos : pos + step]
            pos += len(chunk)
            out += dec.decompress(chunk)
            if len(out) > limit:
                raise _too_large(limit)
        if not dec.eof:
            raise TruncatedArchiveError(out)
        pos -= len(dec.unused_data)
    return out


def inflate(data: bytes | bytearray, codec: str, limit: int) -> bytearray:
    """All members/frames of `data`, decompressed.

    Raises DecompressedTooLargeError past `limit` output bytes, TruncatedArchiveError (holding what was
    recovered) when the input ends before an end marker, and zlib.error / zstandard.ZstdError on corrupt input.
    """
    if codec == "gzip":
        return _gunzip(data, limit)
    if codec == "zstd":
        return _unzstd(data, limit)
    raise ValueError(f"unknown codec {codec!r}")
