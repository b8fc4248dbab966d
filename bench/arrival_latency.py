"""New S3 object -> visible to read_committed readers of the topic: p50 / p95 over a stream of uploads.

    .venv/bin/python bench/arrival_latency.py [--uploads 20] [--interval 30] [--prefixes 3]

Starts a throw-away stack on free ports under a temp dir (3 brokers, S3, PostgreSQL, MLflow, and the Dagster
webserver + daemon with the deployed `raw_s3_sensor`), then uploads one object of the generated sample every
`--interval` seconds, in turn under `--prefixes` source prefixes (`raw/web/`, `raw/code/`, `raw/books/`, ...:
each sorts before the one used before it, so the newest key taken never bounds where the next one lands; 0: one
append-style `raw/<ns clock>-<id>/` prefix per upload). For each object it records when the sensor registered it in a
batch, when that batch's run started and ended, and when the batch's ledger record (written in the same Kafka
transaction as its blocks) became readable with read_committed: that last moment is "visible". Writes
bench/results/arrival_latency.json and prints a table with the load average. Goal: p50 <= 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline_project.stack import Stack  # noqa: E402
from pipeline_project.streaming.ledger.records import read_ledger  # noqa: E402
from pipeline_project_harness.reliability import dagster_faults as df  # noqa: E402
from pipeline_project_harness.reliability.faults import kafka_of  # noqa: E402
from pipeline_project_harness.reliability.stacks import ROOT_PREFIXES, throwaway_stack  # noqa: E402

RESULTS = REPO / "bench" / "results" / "arrival_latency.json"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


SOURCES = ("web", "code", "books", "audio", "news")  # each sorts before the one before it


def upload_interleaved(stack: Stack, i: int, prefixes: int) -> str:
    """Upload i goes under source i mod `prefixes`, with a sequence key."""
    from pipeline_project.demo.sample.corpus import generate

    settings = stack.settings()
    f = generate(seed=500 + i, docs_per_language=1)[0]
    key = f"{settings.raw_prefix}{SOURCES[i % prefixes]}/{i:06d}-{f.key.rsplit('/', 1)[-1]}"
    settings.s3_client().put_object(Bucket=settings.bucket, Key=key, Body=f.data)
    return key


def measure(stack: Stack, uploads: int, interval_s: float, timeout_s: float, prefixes: int = 0) -> list[dict]:
    instance = df.dagster_instance(stack)
    kafka, topic = kafka_of(stack), stack.settings().topic
    rows: list[dict] = []
    pending: list[dict] = []
    next_upload = time.time()
    deadline = None
    try:
        while len(rows) < uploads or pending:
            now = time.time()
            if len(rows) < uploads and now >= next_upload:
                if prefixes:
                    key = upload_interleaved(stack, len(rows), prefixes)
                else:
                    key = df.upload_wave(stack, seed=500 + len(rows), files=1)[0]
                row = {"key": key, "uploaded": time.time()}
                rows.append(row)
                pending.append(row)
                next_upload += interval_s
                deadline = time.time() + timeout_s
            if pending:
                batches = df.registered_batches(stack, instance)
                ledger = read_ledger(kafka, topic)
                for row in list(pending):
                    if "batch" not in row:
                        row["batch"] = next((b for b, keys in batches.items() if row["key"] in keys), None)
                        if row["batch"] is None:
                            del row["batch"]
                            continue
                        row["registered"] = time.time()
                    if row["batch"] in ledger:
                        row["visible"] = time.time()
                        runs = df.sensor_runs(instance, row["batch"])
                        if runs:
                            rec = instance.get_run_record_by_id(runs[0].run_id)
                            row["run_id"], row["run_start"], row["run_end"] = (
                                runs[0].run_id,
                                rec.start_time,
                                rec.end_time,
                            )
                            row["run_status"] = rec.dagster_run.status.value
                        pending.remove(row)
                        print(f"  {row['key']}: visible after {row['visible'] - row['uploaded']:.1f}s", flush=True)
            if deadline is not None and pending and time.time() > deadline:
                for row in pending:
                    row["timed_out"] = True
                    print(f"  {row['key']}: not visible within {timeout_s:g}s", flush=True)
                pending.clear()
            time.sleep(0.5)
        settle_runs(instance, rows)
    finally:
        instance.dispose()
    return rows


def settle_runs(instance, rows: list[dict], timeout_s: float = 120.0) -> None:
    """After the last object is visible: each run's end (its asset checks run after the blocks are visible) and
    the seconds of each of its steps."""
    deadline = time.time() + timeout_s
    for row in rows:
        if "run_id" not in row:
            continue
        rec = instance.get_run_record_by_id(row["run_id"])
        while rec.end_time is None and time.time() < deadline:
            time.sleep(1.0)
            rec = instance.get_run_record_by_id(row["run_id"])
        row["run_end"], row["run_status"] = rec.end_time, rec.dagster_run.status.value
        row["steps_s"] = {
            s.step_key: round(s.end_time - s.start_time, 2)
            for s in instance.get_run_step_stats(row["run_id"])
            if s.start_time is not None and s.end_time is not None
        }


def spread(v: list[float]) -> dict:
    p50, p95 = round(percentile(v, 0.5), 1), round(percentile(v, 0.95), 1)
    return {"n": len(v), "p50_s": p50, "p95_s": p95, "mean_s": round(statistics.fmean(v), 1)}


def summarize(rows: list[dict]) -> dict:
    def span(a: str, b: str) -> list[float]:
        return [r[b] - r[a] for r in rows if r.get(a) is not None and r.get(b) is not None]

    parts = {
        "upload -> visible": span("uploaded", "visible"),
        "upload -> registered by the sensor": span("uploaded", "registered"),
        "registered -> run started": span("registered", "run_start"),
        "run started -> visible": span("run_start", "visible"),
        "run started -> run ended (with its asset checks)": span("run_start", "run_end"),
    }
    out = {name: spread(v) for name, v in parts.items() if v}
    steps = sorted({k for r in rows for k in r.get("steps_s", {})})
    for step in steps:
        v = [r["steps_s"][step] for r in rows if step in r.get("steps_s", {})]
        out[f"step {step}"] = spread(v)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between uploads")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up on an object after this many seconds")
    parser.add_argument("--prefixes", type=int, default=3, choices=range(len(SOURCES) + 1),
                        help="source prefixes the uploads take turns under (0: a new append-style prefix each)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.time()
    with throwaway_stack(ROOT_PREFIXES[1]) as stack:
        df.start_dagster(stack)
        load_start = os.getloadavg()
        rows = measure(stack, args.uploads, args.interval, args.timeout, args.prefixes)
        load_end = os.getloadavg()

    summary = summarize(rows)
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
        "cpus": os.cpu_count(),
        "load_avg": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]},
        "interval_s": args.interval,
        "prefixes": args.prefixes,
        "timed_out": sum(1 for r in rows if r.get("timed_out")),
        "summary": summary,
        "uploads": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\n| span ({len(rows)} uploads, one every {args.interval:g} s) | p50 s | p95 s | mean s |")
    print("|---|---:|---:|---:|")
    for name, s in summary.items():
        print(f"| {name} | {s['p50_s']} | {s['p95_s']} | {s['mean_s']} |")
    la = result["load_avg"]
    print(f"\nload average {la['start'][0]} -> {la['end'][0]} (1 min), {os.cpu_count()} CPUs; "
          f"{result['timed_out']} timed out; {result['wall_s']:.0f}s -> {args.out}")  # fmt: skip
    return 0 if result["timed_out"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
