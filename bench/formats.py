"""Reading cost by input format: documents per second per core, each format next to JSONL, on equal text.

    .venv/bin/python bench/formats.py [--docs 2000] [--words 300] [--repeat 3]

Generates `--docs` documents of prose (`demo.sample.corpus`), the same texts in every format, and reads each
object through the readers (`read_object`, one process: documents per CPU-second is documents per second per
core). Formats: JSONL (the baseline), Parquet with FineWeb's columns, WET (conversion records), WARC (HTML
responses through trafilatura, and the same pages as plain .html objects for comparison), source files (one
object per file), and the source files as a .tar.gz and a .zip. Writes bench/results/formats.json and prints a
table with the load average.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import sys
import tarfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline_project.cleaning import CleaningConfig, Document, read_object  # noqa: E402
from pipeline_project.cleaning.config import ReaderConfig  # noqa: E402
from pipeline_project.demo.sample.corpus import prose_document  # noqa: E402
from pipeline_project_harness.format_samples import fineweb_parquet, html_page, warc_bytes  # noqa: E402

RESULTS = REPO / "bench" / "results" / "formats.json"


def _texts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = ""
        while len(text.split()) < words:
            text += prose_document(rng, "en", 2) + "\n"
        out.append(" ".join(text.split(" ")[:words]))
    return out


def _code(text: str, i: int) -> str:
    """The same words as a Python module: a docstring of the text and a function (equal text, code shape)."""
    return f'"""{text}"""\n\n\ndef value_{i}():\n    return {i}\n'


def build(texts: list[str]) -> dict[str, list[tuple[str, bytes]]]:
    """format -> its objects (key, bytes), each holding all of `texts`."""
    n = len(texts)
    jsonl = b"".join(json.dumps({"text": t, "id": str(i)}).encode() + b"\n" for i, t in enumerate(texts))
    wet = [("conversion", f"https://e.org/{i}", t.encode(), "text/plain", None) for i, t in enumerate(texts)]
    warc = [
        ("response", f"https://e.org/{i}", html_page(f"p{i}", t), "text/html", "200 OK") for i, t in enumerate(texts)
    ]
    sources = {f"repo/pkg/mod_{i}.py": _code(t, i).encode() for i, t in enumerate(texts)}
    tgz, zipped = io.BytesIO(), io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as tar:
        for name, data in sources.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in sources.items():
            z.writestr(name, data)
    return {
        "jsonl": [("raw/b/docs.jsonl", jsonl)],
        "jsonl.gz": [("raw/b/docs.jsonl.gz", gzip.compress(jsonl))],
        "parquet": [("raw/b/docs.parquet", fineweb_parquet(texts, row_group_size=max(1, n // 4)))],
        "wet": [("raw/b/docs.warc.wet", warc_bytes(wet))],
        "wet.gz": [("raw/b/docs.warc.wet.gz", warc_bytes(wet, gzip=True))],
        "source files": [(f"raw/b/{name}", data) for name, data in sources.items()],
        "tar.gz of sources": [("raw/b/repo.tar.gz", tgz.getvalue())],
        "zip of sources": [("raw/b/repo.zip", zipped.getvalue())],
        "html (trafilatura)": [(f"raw/b/p{i}.html", html_page(f"p{i}", t)) for i, t in enumerate(texts)],
        "warc.gz (trafilatura)": [("raw/b/crawl.warc.gz", warc_bytes(warc, gzip=True))],
    }


def measure(objects: list[tuple[str, bytes]], config: CleaningConfig, repeat: int) -> dict:
    best = None
    for _ in range(repeat):
        docs = other = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for key, data in objects:
            for rec in read_object(key, data, config):
                if isinstance(rec, Document):
                    docs += 1
                else:
                    other += 1
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if best is None or cpu < best["cpu_s"]:
            best = {"docs": docs, "other_records": other, "cpu_s": round(cpu, 4), "wall_s": round(wall, 4)}
    best["docs_per_cpu_s"] = round(best["docs"] / best["cpu_s"], 1) if best["cpu_s"] else None
    best["input_bytes"] = sum(len(d) for _, d in objects)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.time()
    texts = _texts(args.docs, args.words)
    formats = build(texts)
    config = CleaningConfig(reader=ReaderConfig(extract_html=True))
    load_start = os.getloadavg()
    rows = {name: measure(objects, config, args.repeat) for name, objects in formats.items()}
    load_end = os.getloadavg()
    base = rows["jsonl"]["docs_per_cpu_s"]
    for row in rows.values():
        row["vs_jsonl"] = round(row["docs_per_cpu_s"] / base, 3) if row["docs_per_cpu_s"] and base else None

    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
        "cpus": os.cpu_count(),
        "load_avg": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]},
        "docs": args.docs,
        "words_per_doc": args.words,
        "text_bytes": sum(len(t.encode()) for t in texts),
        "formats": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(
        f"\n| format ({args.docs} docs of {args.words} words) | docs | other records | input MB | CPU s | docs/s per core | vs JSONL |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['docs']} | {r['other_records']} | {r['input_bytes'] / 1e6:.2f} | {r['cpu_s']:.3f} | "
            f"{r['docs_per_cpu_s']:,.0f} | {r['vs_jsonl']:.2f}x |"
        )
    la = result["load_avg"]
    print(
        f"\nload average {la['start'][0]} -> {la['end'][0]} (1 min), {os.cpu_count()} CPUs; "
        f"{result['wall_s']:.0f}s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
