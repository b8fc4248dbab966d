"""Scaling of cleaning over a process pool: the same documents through the whole chain in process, and with its
per-document filters in `FilterPool` with 1 and 2 workers (dedup and PII stay in the caller), side by side,
decisions compared.

    .venv/bin/python bench/cleaning_pool.py [--files 4] [--repeats 3]

Reads web_noisy JSONL from ../shared/corpus. Prints a table with the load average, writes
bench/results/cleaning_pool.json. Wall seconds (the pool's point is wall time), medians of the repeats.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import time
from statistics import median

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RESULTS = ROOT / "bench" / "results" / "cleaning_pool.json"


def main() -> None:
    from pipeline_project.cleaning import CleaningConfig, read_object
    from pipeline_project.cleaning.chain.chain import CleaningPipeline
    from pipeline_project.cleaning.chain.pool import FilterPool

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = CleaningConfig()
    items = []
    for f in sorted((CORPUS / "web_noisy").glob("*.jsonl"))[: args.files]:
        items += list(read_object(f.name, f.read_bytes(), cfg))
    mb = sum(len(getattr(d, "text", "")) for d in items) / 1e6
    load = os.getloadavg()

    def timed(pipeline) -> tuple[float, object]:
        times, result = [], None
        for _ in range(args.repeats):
            t = time.perf_counter()
            result = pipeline.finish(pipeline.start(copy.deepcopy(items), "b"))  # one chunk, no index
            times.append(time.perf_counter() - t)
        return median(times), result

    warm = CleaningPipeline(cfg)
    warm.finish(warm.start(copy.deepcopy(items[:8]), "warm"))  # models loaded
    rows, results = {}, {}
    rows["in_process"], results["in_process"] = timed(CleaningPipeline(cfg))
    for workers in (1, 2):
        with FilterPool(cfg, workers) as pool:
            rows[f"pool_{workers}"], results[workers] = timed(CleaningPipeline(cfg, pool=pool))
    base = results["in_process"]
    same = all(
        [(d.id, d.reason) for d in r.dropped] == [(d.id, d.reason) for d in base.dropped]
        and [d.id for d in r.kept] == [d.id for d in base.kept]
        for r in (results[1], results[2])
    )
    out = {
        "documents": len(items),
        "mb": round(mb, 2),
        "seconds": {k: round(v, 3) for k, v in rows.items()},
        "scaling_1_to_2_workers": round(rows["pool_1"] / rows["pool_2"], 2),
        "pool_2_vs_in_process": round(rows["in_process"] / rows["pool_2"], 2),
        "identical_decisions": same,
        "load_average": load,
    }
    RESULTS.write_text(json.dumps(out, indent=1))
    print(f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; {len(items)} documents, {mb:.1f} MB")
    print("| cleaning chain | wall s (median) | MB/s |\n|---|---:|---:|")
    for k, v in rows.items():
        print(f"| {k} | {v:.2f} | {mb / v:.2f} |")
    print(f"scaling 1 -> 2 workers: {out['scaling_1_to_2_workers']}x; identical decisions: {same}")


if __name__ == "__main__":
    main()
