"""Bytes to text for the readers: UTF-8 (strict, then lossy for a few bad bytes), UTF-16/32 with or without a
BOM, then charset-normalizer's guess; and the repair of lone surrogates that UTF-8 cannot encode."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator

from pipeline_project.cleaning.config import ReaderConfig
from pipeline_project.cleaning.errors import DocumentTooLargeError, UndecodableError

_SURROGATE = re.compile("[\ud800-\udfff]")
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SNIFF_BYTES = 64 * 1024


def repair_surrogates(text: str) -> tuple[str, int]:
    """Lone surrogates (JSON "\\ud800" escapes) cannot be written as UTF-8: replace each with U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text, 0
    return _SURROGATE.subn("\ufffd", text)


def decode_bytes(data: bytes | bytearray, cfg: ReaderConfig) -> tuple[str, str]:
    """Return (text, encoding). Strict UTF-8, then lossy UTF-8 for a few bad bytes, then detection."""
    if data.startswith(codecs.BOM_UTF8):
        try:
            return data.decode("utf-8-sig"), "utf-8-sig"
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    lossy = data.decode("utf-8", errors="replace")
    if lossy.count("\ufffd") <= cfg.max_invalid_utf8_fraction * max(len(data), 1):
        return lossy, "utf-8-lossy"
    del lossy
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(bytes(data)).best()
        if best is None or best.encoding is None:
            raise UndecodableError("no encoding fits")
        return str(best), best.encoding
    except UndecodableError:
        raise
    except Exception as exc:  # charset-normalizer's own failures mean an undecodable input
        raise UndecodableError(f"encoding detection failed ({type(exc).__name__})") from exc


def wide_codecs(data: bytes | bytearray) -> tuple[list[str], bool]:
    """UTF-32/16 codecs worth a strict try, most specific first, and whether a BOM named them.

    Without a BOM, UTF-32 is proposed when every fourth byte is NUL, UTF-16 when at least 5 % of the bytes are
    NUL and 95 % of those fall on one parity (what Latin-script UTF-16 looks like). A strict decode decides.
    """
    bommed = [name for bom, name in _WIDE_BOMS if data.startswith(bom)]
    if bommed:
        return list(dict.fromkeys(bommed)), True
    sample = bytes(data[:_SNIFF_BYTES])  # a multiple of 4
    nuls = sample.count(0)
    if nuls * 20 < len(sample) or len(sample) < 4:
        return [], False
    out = []
    if len(data) % 4 == 0:
        quarter = len(sample) // 4
        if sample[3::4].count(0) == quarter:
            out.append("utf-32-le")
        if sample[0::4].count(0) == quarter:
            out.append("utf-32-be")
    if len(data) % 2 == 0:
        odd = sample[1::2].count(0)
        if odd >= 0.95 * nuls:
            out.append("utf-16-le")
        elif nuls - odd >= 0.95 * nuls:
            out.append("utf-16-be")
    return out, False


_PIECE = 1 << 20


def transcode_wide(
    data: bytes | bytearray, truncated: bool, limit: int | None = None
) -> tuple[bytes | bytearray, str | None]:
    """UTF-16/32 bytes re-encoded as UTF-8 (so lines split on b"\\n"), and their codec; other bytes unchanged.

    Transcoded a piece at a time, so memory holds `data`, the output so far and one piece: the output never
    passes `limit` bytes (DocumentTooLargeError). Raises UndecodableError when a BOM names a wide codec that the
    bytes do not decode in.
    """
    names, bommed = wide_codecs(data)
    for name in names:
        unit = 4 if "32" in name else 2
        body = memoryview(data)[: len(data) - len(data) % unit] if truncated else memoryview(data)
        try:
            return _transcode(body, name, limit), name
        except UnicodeDecodeError:
            continue
    if bommed:
        raise UndecodableError(f"a {names[0].upper()} byte-order mark, but the bytes after it are not {names[0]}")
    return data, None


def _transcode(body: memoryview, name: str, limit: int | None) -> bytearray:
    out = bytearray()
    for piece in transcode_stream((body[i : i + _PIECE] for i in range(0, len(body), _PIECE)), name):
        out += piece
        if limit is not None and len(out) > limit:
            raise DocumentTooLargeError(f"transcodes from {name} past {limit} bytes")
    return out


def transcode_stream(pieces: Iterable[bytes | bytearray | memoryview], name: str) -> Iterator[bytes]:
    """`pieces` of `name`-encoded text as UTF-8, piece by piece (strict: UnicodeDecodeError on invalid input,
    and on input that ends inside a character)."""
    decoder = codecs.getincrementaldecoder(name)("strict")
    for piece in pieces:
        text = decoder.decode(piece)
        if text:
            yield text.encode("utf-8", errors="replace")
    text = decoder.decode(b"", final=True)
    if text:
        yield text.encode("utf-8", errors="replace")
