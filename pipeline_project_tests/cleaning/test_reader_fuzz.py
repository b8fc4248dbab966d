"""Fuzz: arbitrary bytes under every supported suffix never make the readers raise, and every record is accounted.

The properties, for any key and bytes:
- `read_object` returns (never raises) at least one record; each is a Document or a Quarantined from that key;
- a Quarantined has a reason of `readers.REASONS` and a short detail; ids are unique;
- a Document's text and meta encode as UTF-8 / strict JSON, and the shard writer takes it;
- for plain JSON Lines, either one record stands for the whole object, or there is one record per non-blank line.
"""

import gzip
import json

import zstandard
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined, read_object, write_shards
from pipeline_project.cleaning.config import ReaderConfig
from pipeline_project.cleaning.read.encodings import wide_codecs
from pipeline_project.cleaning.read.readers import REASONS, SUPPORTED_SUFFIXES, split_suffix
from pipeline_project.cleaning.records import MAX_DETAIL_CHARS, REASON_PATTERN

CONFIGS = [
    CleaningConfig(),
    CleaningConfig(reader=ReaderConfig(max_line_bytes=300, max_document_bytes=1500, max_decompressed_bytes=4000)),
    CleaningConfig(reader=ReaderConfig(extract_html=True, max_line_bytes=300)),
]

_fragments = st.sampled_from(
    [
        b'{"text": "a plain line of text", "url": "https://example.org/x"}',
        b'{"text": "lone \\ud800 surrogate", "t\\udfff": "\\udc00"}',
        b'{"text": "pair \\ud83d\\ude00", "n": NaN, "i": -Infinity, "big": 1e999}',
        b'{"text": 5}',
        b'{"body": "no text"}',
        b"[1, 2, 3]",
        b'"just a string"',
        b"null",
        b"{" * 3000,
        b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b', "text": "deep"}',
        b'{"text": "' + b"\x01\x02\x1b" * 5 + b'"}',
        b'{"text": "nul\x00byte"}',
        b'{"text": "mail jane.doe@example.com from 8.8.8.8"}',
        b"\xef\xbb\xbf" + b'{"text": "utf-8 bom"}',
        b"\xff\xfe" + '{"text": "utf-16"}'.encode("utf-16-le"),
        b'{"text": "' + b"x" * 400 + b'"}',
        b'{"text": "caf\xe9 latin-1"}',
        b"   ",
        b"",
        b"<html><body><p>Some page text that is long enough to be extracted by trafilatura.</p></body></html>",
        b'{"text": "' + b"9" * 5000 + b'", "x": ' + b"9" * 5000 + b"}",
    ]
)
_lines = st.lists(st.one_of(_fragments, _fragments, _fragments, st.binary(max_size=200)), max_size=12).map(b"\n".join)
_payload = st.one_of(st.binary(max_size=3000), _lines, _lines, _lines)
_JSONL = [s for s in SUPPORTED_SUFFIXES if split_suffix(s)[0] == "jsonl"]
_suffixes = st.one_of(
    st.sampled_from(_JSONL),
    st.sampled_from(_JSONL),
    st.sampled_from([*SUPPORTED_SUFFIXES, ".bin", ".TXT", ".Jsonl.GZ"]),
)


def _compress(data: bytes, codec: str | None) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "zstd":
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)
    return data


@st.composite
def _objects(draw):
    suffix = draw(_suffixes)
    named = (split_suffix(suffix) or (None, None))[1]
    data = draw(_payload)
    how = draw(st.sampled_from(["as named"] * 4 + ["raw", "gzip", "zstd", "cut", "utf-16", "utf-32-le"]))
    if how.startswith("utf"):
        data = _compress(data.decode("latin-1").encode(how), named)
    elif how in ("gzip", "zstd"):
        data = _compress(data, how)
    elif how != "raw":
        data = _compress(data, named)
    if how == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    return f"raw/fuzz/obj{suffix}", data, draw(st.sampled_from(range(len(CONFIGS))))


def _non_blank_lines(data: bytes) -> list[int]:
    return [i for i, line in enumerate(data.split(b"\n"), start=1) if line.strip()]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_objects())
def test_readers_never_raise_and_account_for_every_record(obj):
    key, data, which = obj
    config = CONFIGS[which]
    out = list(read_object(key, data, config))
    assert out, "an object always yields at least one record"
    for o in out:
        event(getattr(o, "reason", "document"))
    ids = [o.id for o in out]
    assert len(ids) == len(set(ids)), ids
    docs = []
    for o in out:
        assert isinstance(o, Document | Quarantined) and o.source == key
        if isinstance(o, Quarantined):
            assert o.reason in REASONS and REASON_PATTERN.fullmatch(o.reason), o.reason
            assert len(o.detail) <= MAX_DETAIL_CHARS
            o.detail.encode("utf-8")
        else:
            o.text.encode("utf-8")
            json.dumps(o.meta, ensure_ascii=False, allow_nan=False).encode("utf-8")
            docs.append(o)
    write_shards(docs)
    kind = split_suffix(key)
    plain = data[:2] != b"\x1f\x8b" and data[:4] != b"\x28\xb5\x2f\xfd" and not wide_codecs(data)[0]
    if kind == ("jsonl", None) and plain and ids != [key]:
        assert ids == [f"{key}#{n}" for n in _non_blank_lines(data)]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(SUPPORTED_SUFFIXES))
def test_pure_random_bytes_under_every_suffix(data, suffix):
    out = list(read_object(f"r{suffix}", data, CONFIGS[0]))
    assert out and all(isinstance(o, Document | Quarantined) for o in out)
