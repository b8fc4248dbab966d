"""The document limit holds while inflating and while transcoding: a small archive that inflates to gigabytes,
or UTF-16 text over the limit, is quarantined with its reason, and peak memory stays a small multiple of the
limit (measured as the ru_maxrss growth of a fresh subprocess)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import pytest
import zstandard

from pipeline_project.cleaning import CleaningConfig, read_object, read_stream
from pipeline_project.cleaning.config import ReaderConfig

MB = 1 << 20
LIMIT = 4 * MB
LINE = ('{"text": "' + "a" * 200 + '"}\n').encode("utf-16-le")


def _gzip_bomb(n: int, unit: bytes = b"a") -> bytes:
    """About n bytes once inflated: copies of one gzip member of 1 MiB (every member is read)."""
    return gzip.compress(unit * (MB // len(unit)), 9) * (n // MB)


def _zstd_bomb(n: int, unit: bytes = b"a") -> bytes:
    """About n bytes once inflated: copies of one zstd frame of 1 MiB (every frame is read)."""
    return zstandard.ZstdCompressor(level=19).compress(unit * (MB // len(unit))) * (n // MB)


_MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    from pipeline_project.cleaning import CleaningConfig, read_object, read_stream
    from pipeline_project.cleaning.config import ReaderConfig
    key, path, streamed, limit = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    data = open(path, "rb").read()
    reader = ReaderConfig(max_document_bytes=limit, max_line_bytes=limit, extract_html=True)
    config = CleaningConfig(reader=reader)
    list(read_object("warm.jsonl.gz", b"", config))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    blocks = (data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20))
    reasons = {}  # counted, not held: the records would cost more memory than the reader
    for r in read_stream(key, blocks, config) if streamed else read_object(key, data, config):
        reason = getattr(r, "reason", "doc")
        reasons[reason] = reasons.get(reason, 0) + 1
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"grown_kb": grown, "reasons": reasons}))
    """
)


def _measure(tmp_path, key: str, data: bytes, streamed: bool) -> dict:
    path = tmp_path / "object"
    path.write_bytes(data)
    args = [sys.executable, "-c", _MEASURE, key, str(path), "1" if streamed else "0", str(LIMIT)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


BOMBS = {
    "gzip_txt": ("bomb.txt.gz", lambda: _gzip_bomb(1200 * MB)),
    "zstd_txt": ("bomb.txt.zst", lambda: _zstd_bomb(1200 * MB)),
    "gzip_html": ("bomb.html.gz", lambda: _gzip_bomb(1200 * MB)),
    "gzip_jsonl_line": ("bomb.jsonl.gz", lambda: _gzip_bomb(1200 * MB)),
    "zstd_jsonl_line": ("bomb.jsonl.zst", lambda: _zstd_bomb(1200 * MB)),
    "utf16_txt": ("wide.txt", lambda: "\ufeffa".encode("utf-16-le") + "a".encode("utf-16-le") * (3 * MB)),
    "utf16_txt_gz": ("wide.txt.gz", lambda: _gzip_bomb(64 * MB, "a".encode("utf-16-le"))),
    "utf16_jsonl_gz": ("wide.jsonl.gz", lambda: _gzip_bomb(16 * MB, LINE)),
}
EXPECTED = {
    "gzip_txt": "decompressed_too_large",
    "zstd_txt": "decompressed_too_large",
    "gzip_html": "decompressed_too_large",
    "gzip_jsonl_line": "decompressed_too_large",
    "zstd_jsonl_line": "decompressed_too_large",
    "utf16_txt": "document_too_large",
    "utf16_txt_gz": "decompressed_too_large",
}


@pytest.mark.parametrize("streamed", [False, True], ids=["read_object", "read_stream"])
@pytest.mark.parametrize("name", list(BOMBS))
def test_bombs_are_quarantined_in_memory_bounded_by_the_document_limit(tmp_path, name, streamed):
    key, make = BOMBS[name]
    data = make()
    assert len(data) < 8 * MB
    got = _measure(tmp_path, key, data, streamed)
    if name == "utf16_jsonl_gz":  # every line is read, within the object limit, in memory of a few lines
        assert got["reasons"] == {"doc": 16 * (MB // len(LINE))}
    else:
        assert got["reasons"] == {EXPECTED[name]: 1}
    assert got["grown_kb"] * 1024 < 6 * LIMIT + len(data), f"{name}: grew {got['grown_kb'] >> 10} MiB"


def test_a_utf16_document_under_the_limit_is_still_read():
    config = CleaningConfig(reader=ReaderConfig(max_document_bytes=LIMIT))
    text = "Ein Absatz über Grenzen. " * 1000
    [doc] = read_object("ok.txt", "\ufeff".encode("utf-16-le") + text.encode("utf-16-le"), config)
    assert doc.text == text and doc.meta["encoding"] == "utf-16"
    jsonl = "".join(json.dumps({"text": f"zeile {i} äö"}) + "\n" for i in range(50_000)).encode("utf-16")
    assert len(jsonl) > 2 * MB
    for records in (read_object("ok.jsonl", jsonl, config), read_stream("ok.jsonl", [jsonl[:MB], jsonl[MB:]], config)):
        docs = list(records)
        assert [d.text for d in docs[:2]] == ["zeile 0 äö", "zeile 1 äö"] and len(docs) == 50_000
