"""The checkpoint trigger's tick as batches accumulate: a tick that counts every token_blocks materialization (a
tick without a cursor, as every tick was before the trigger carried its backlog) against a tick that carries its
backlog in its cursor and reads the one batch materialized since.

N batches are reported to a temporary Dagster instance (SQLite storage, as `dagster dev` without PostgreSQL)
with real-size metadata; a checkpoint trains all but the last 10. Each tick is timed `--repeats` times (median).

Usage:  .venv/bin/python bench/trigger_tick.py [--batches 1000 10000] [--repeats 3]
Prints a markdown table, writes bench/results/trigger_tick.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import dagster as dg
from bench_results import host, load_line, print_table, write

from pipeline_project.defs.assets.backlog import BacklogState
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.defs.resources.trigger import TrainingTrigger
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor

RESULTS = Path(__file__).resolve().parent / "results" / "trigger_tick.json"
PARTITIONS = 8

NEVER = TrainingTrigger(min_new_tokens=10**15)  # never request a run: only the counting is timed


def materialize(instance: dg.DagsterInstance, i: int) -> None:
    ranges = {str(p): [i * 10, i * 10 + 9] for p in range(PARTITIONS)}
    table = "\n".join(f"| {p} | {a} | {b} | 10 |" for p, (a, b) in ranges.items())
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            "token_blocks",
            partition=f"batch-{i:08d}",
            metadata={
                "tokens": 4_000_000,
                "offset_ranges": ranges,
                "offsets_table": dg.MetadataValue.md(
                    "| partition | first | last | offsets |\n|---|---|---|---|\n" + table
                ),
                "kafka_stats": {k: 12345.6 for k in ("tx_bytes", "rx_bytes", "tx_msgs", "broker_rtt_avg_ms")},
                "stage_seconds": dict.fromkeys(("setup", "read", "tokenize", "pack", "encode", "produce"), 0.1),
                "topic": "token-blocks",
            },
        )
    )


def checkpoint(instance: dg.DagsterInstance, offset: int) -> None:
    position = {str(p): {"offset": offset, "block": 0} for p in range(PARTITIONS)}
    instance.report_runless_asset_event(
        dg.AssetMaterialization("deepseek_checkpoint", metadata={"end_position": dg.MetadataValue.json(position)})
    )


def tick(instance: dg.DagsterInstance, cursor: str | None) -> tuple[float, str]:
    t0 = time.perf_counter()
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"trigger": NEVER, "trainer": TrainerResource()}
    ) as ctx:
        result = checkpoint_trigger_sensor(ctx)
    return time.perf_counter() - t0, result.cursor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    rows = []
    with dg.instance_for_test() as instance:
        done = 0
        for n in args.batches:
            while done < n:
                materialize(instance, done)
                done += 1
            checkpoint(instance, (n - 10) * 10)
            cold = [tick(instance, None)[0] for _ in range(args.repeats)]
            _, cursor = tick(instance, None)
            warm = []
            for _ in range(args.repeats):
                materialize(instance, done)
                done += 1
                seconds, cursor = tick(instance, cursor)
                warm.append(seconds)
            pending = len(BacklogState.from_cursor(cursor).pending)
            rows.append({"batches": n, "tick_without_cursor_s": statistics.median(cold),
                         "tick_with_cursor_s": statistics.median(warm), "cursor_bytes": len(cursor),
                         "pending_batches": pending, "runs": {"cold": cold, "warm": warm}})  # fmt: skip
            print(f"{n} batches done", flush=True)
    result = {"host": host(load_start), "repeats": args.repeats, "rows": rows}
    write(RESULTS, result)
    print(f"\nCheckpoint trigger tick, median of {args.repeats} (SQLite instance; {load_line(result)})\n")
    print_table(
        ["token_blocks batches", "tick counting every batch", "tick carrying its backlog", "cursor", "batches in it"],
        ["r"] * 5,
        [
            [
                f"{r['batches']:,}",
                f"{r['tick_without_cursor_s']:.3f} s",
                f"{r['tick_with_cursor_s']:.3f} s",
                f"{r['cursor_bytes']:,} B",
                str(r["pending_batches"]),
            ]
            for r in rows
        ],
    )
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()
