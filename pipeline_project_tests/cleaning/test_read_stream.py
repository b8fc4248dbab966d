"""`read_stream`: a JSONL object that arrives in blocks is read line by line, in memory that does not grow with
it, and gives the records `read_object` gives for the same bytes; where the stream fails, what came before is
kept and the rest is one quarantine record."""

import codecs
import gzip
import json
import random
import tracemalloc

import pytest
import zstandard

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined, read_object, read_stream
from pipeline_project.cleaning.config import ReaderConfig
from pipeline_project.cleaning.read import readers

CONFIG = CleaningConfig(reader=ReaderConfig(max_line_bytes=300))


def _line(text: str, **fields) -> bytes:
    return json.dumps({"text": text, **fields}, ensure_ascii=False).encode() + b"\n"


MIXED = b"".join(
    [
        codecs.BOM_UTF8 + _line("first, after a BOM"),
        b"\n   \n",
        _line("zweite Zeile, ünïcode", n=2),
        b"{not json\n",
        b"[1, 2]\n",
        _line("long " * 100),  # over max_line_bytes: counted, never held
        _line("a\x00b").replace(b"\\u0000", b"\x00"),
        b'{"other": "no text field"}\n',
        _line("中文的一行，写得足够长。" * 3),
        b"\xff\xfe not utf-8 \xe9t\xe9\n",
        *[_line(f"document number {i} " * (i % 7 + 1)) for i in range(40)],
        _line("x" * 400)[:-1],  # the last line: over-long and without a newline
    ]
)


def _blocks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _records(items) -> list[tuple]:
    return [
        (i.id, "doc", i.text, json.dumps(i.meta, sort_keys=True))
        if isinstance(i, Document)
        else (i.id, i.reason, i.detail)
        for i in items
    ]


@pytest.fixture
def small_window(monkeypatch):
    monkeypatch.setattr(readers, "STREAM_WINDOW", 64)


@pytest.mark.parametrize("block", [1, 7, 100, 4096])
@pytest.mark.parametrize(
    ("suffix", "encode"),
    [
        ("", lambda b: b),
        (".gz", gzip.compress),
        (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
        (".gz", lambda b: gzip.compress(b[:700]) + gzip.compress(b[700:])),  # two members
    ],
)
def test_streamed_jsonl_gives_the_records_a_whole_read_gives(small_window, block, suffix, encode):
    key = f"raw/m.jsonl{suffix}"
    data = encode(MIXED)
    whole = _records(read_object(key, data, CONFIG))
    assert len(whole) > 45 and {r[1] for r in whole} >= {"doc", "line_too_long", "bad_json_line", "nul_bytes"}
    assert _records(read_stream(key, _blocks(data, block), CONFIG)) == whole


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.95])
def test_a_cut_archive_keeps_the_complete_lines_before_the_cut_as_a_whole_read_does(small_window, cut):
    data = gzip.compress(MIXED)
    data = data[: int(len(data) * cut)]
    whole = _records(read_object("raw/t.jsonl.gz", data, CONFIG))
    assert whole[-1][1] == "truncated_archive"
    assert _records(read_stream("raw/t.jsonl.gz", _blocks(data, 50), CONFIG)) == whole


def test_a_corrupt_spot_keeps_the_lines_before_it_and_quarantines_the_rest_as_one_record(small_window):
    rng = random.Random(0)
    lines = [_line(" ".join(f"w{rng.randrange(10**6)}" for _ in range(30))) for i in range(4000)]
    data = bytearray(zstandard.ZstdCompressor(level=1).compress(b"".join(lines)))  # many 128 KiB zstd blocks
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)  # zeros from the middle on
    out = list(read_stream("raw/c.jsonl.zst", _blocks(bytes(data), 512), CONFIG))
    docs = [d for d in out if isinstance(d, Document)]
    assert docs and len(docs) < 4000
    assert [d.text for d in docs] == [json.loads(line)["text"] for line in lines[: len(docs)]]
    assert [(q.id, q.reason) for q in out if isinstance(q, Quarantined)] == [("raw/c.jsonl.zst", "corrupt_archive")]


def test_a_stream_past_the_decompression_limit_keeps_what_came_before_and_stops(small_window):
    config = CleaningConfig(reader=ReaderConfig(max_decompressed_bytes=20_000))
    lines = b"".join(_line(f"line {i} " * 20) for i in range(2000))
    out = list(read_stream("raw/bomb.jsonl.gz", _blocks(gzip.compress(lines), 256), config))
    assert isinstance(out[-1], Quarantined) and out[-1].reason == "decompressed_too_large"
    assert 0 < len(out) - 1 < 200 and all(isinstance(d, Document) for d in out[:-1])


def test_binary_content_in_the_first_window_quarantines_the_object_without_reading_on(small_window):
    pulled = []

    def blocks():
        for i, b in enumerate(_blocks(bytes(range(1, 32)) * 40 + MIXED, 100)):
            pulled.append(i)
            yield b

    [q] = read_stream("raw/bin.jsonl", blocks(), CONFIG)
    assert q.reason == "binary_content" and len(pulled) < 5


def test_utf16_jsonl_over_the_window_is_read_whole(small_window):
    text = "".join(json.dumps({"text": f"ligne {i} é"}) + "\n" for i in range(50))
    data = codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    streamed = _records(read_stream("raw/w.jsonl", _blocks(data, 64), CONFIG))
    assert streamed == _records(read_object("raw/w.jsonl", data, CONFIG))
    assert len(streamed) == 50 and streamed[0][2] == "ligne 0 é"


def test_an_all_blank_stream_is_one_empty_object_record(small_window):
    [q] = read_stream("raw/blank.jsonl", _blocks(b" \n" * 500, 100), CONFIG)
    assert (q.id, q.reason) == ("raw/blank.jsonl", "empty_object")


def test_an_error_of_the_source_propagates_instead_of_quarantining(small_window):
    def blocks():
        yield from _blocks(MIXED[:300], 100)
        raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        list(read_stream("raw/net.jsonl", blocks(), CONFIG))
    with pytest.raises(ConnectionResetError):  # a whole-read object too
        list(read_stream("raw/net.txt", blocks(), CONFIG))


def test_memory_does_not_grow_with_the_object():
    """40 MB of JSONL, in 1 MiB blocks made on demand: the reader's own allocations peak near one block and one
    line, not near the object (tracemalloc counts what Python allocates)."""
    line = _line("word " * 2000)  # ~10 KB
    n = 40_000_000 // len(line)

    def blocks():
        per_block = (1 << 20) // len(line)
        for start in range(0, n, per_block):
            yield line * min(per_block, n - start)

    tracemalloc.start()
    try:
        docs = sum(isinstance(d, Document) for d in read_stream("raw/big.jsonl", blocks(), CleaningConfig()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert docs == n
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB for a {n * len(line) / 2**20:.0f} MiB object"
