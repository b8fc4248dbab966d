"""The checkpoint trigger's tick and carried state at 10^5 .. 10^6 untrained batches, on a PostgreSQL-backed instance.

A fresh database on the local stack's PostgreSQL (dropped at the end) holds a Dagster instance's storage, bulk-loaded
(COPY, `dagster_scale.Loader`) with batches shaped as a real one leaves them (partition, run, a `token_blocks`
materialization with real-size metadata; 1 in 1,000 failed); no checkpoint, so every batch is untrained (a corpus
cleaned long before training starts). The trigger keeps its backlog in the same server (`TrainingTrigger.backlog_url`,
schema `pipeline_backlog` of that database) where the code has that setting. At each size: the sensor's ticks from
nothing until it has counted every batch (each within its 20 s budget; their number and total time), then
`--repeats` carried ticks, each after 10 new batches (median), the cursor's bytes and the backlog rows in the store.

Run it from another checkout (`git worktree add /tmp/before HEAD~1; .venv/bin/python /tmp/before/bench/trigger_tick.py`)
to measure that code under the same load: it imports the checkout it sits in.

Usage:  .venv/bin/python bench/trigger_tick.py [--sizes 100000,1000000] [--repeats 3]
Prints a markdown table, writes bench/results/trigger_tick.json (`--out` to name another file).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import dagster as dg  # noqa: E402
import psycopg2  # noqa: E402
from bench_results import host, load_line, print_table, write  # noqa: E402
from dagster_scale import Loader, make_templates, metadata  # noqa: E402

from pipeline_project.defs.resources.trainer import TrainerResource  # noqa: E402
from pipeline_project.defs.resources.trigger import TrainingTrigger  # noqa: E402
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor  # noqa: E402
from pipeline_project.defs.sensors.trigger_policy import TriggerCursor  # noqa: E402
from pipeline_project.settings import Settings  # noqa: E402

RESULTS = REPO / "bench" / "results" / "trigger_tick.json"
COUNTING = "counting the untrained backlog"


def trigger(url: str) -> TrainingTrigger:
    """A trigger that never requests a run (only the counting is timed), its backlog in `url` where it can be."""
    extra = {"backlog_url": url} if "backlog_url" in TrainingTrigger.model_fields else {}
    return TrainingTrigger(min_new_tokens=10**15, **extra)


def tick(instance: dg.DagsterInstance, url: str, cursor: str | None) -> tuple[float, str, str]:
    t0 = time.perf_counter()
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"trigger": trigger(url), "trainer": TrainerResource()}
    ) as ctx:
        result = checkpoint_trigger_sensor(ctx)
    reason = result.skip_reason.skip_message if result.skip_reason else "requested"
    return time.perf_counter() - t0, result.cursor, reason


def backlog_rows(url: str, cursor: str) -> int:
    """The batches the carried state holds: rows in the store (this code), or entries in the cursor (before it)."""
    backlog = TriggerCursor.from_cursor(cursor).backlog
    if hasattr(backlog, "pending"):
        return len(backlog.pending)
    from pipeline_project.defs.assets.backlog.store import PostgresBacklogStore

    store = PostgresBacklogStore(url)
    try:
        return store.size(backlog.scope)
    finally:
        store.close()


def store_bytes(url: str) -> int:
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = 'pipeline_backlog' AND c.relkind = 'r'")  # fmt: skip
        return int(cur.fetchone()[0])


def measure(instance: dg.DagsterInstance, url: str, size: int, repeats: int, cursor: str | None) -> tuple[dict, str]:
    t0, ticks, reason = time.perf_counter(), 0, COUNTING
    while reason.startswith(COUNTING):
        _, cursor, reason = tick(instance, url, cursor)
        ticks += 1
    catch_up_s = time.perf_counter() - t0
    carried = []
    for r in range(repeats):
        for i in range(10):
            instance.report_runless_asset_event(dg.AssetMaterialization("token_blocks", partition=f"new-{size}-{r}-{i}",
                                                                        metadata=metadata(size + i)))  # fmt: skip
        seconds, cursor, reason = tick(instance, url, cursor)
        carried.append(seconds)
    row = {"batches": size, "catch_up_ticks": ticks, "catch_up_s": round(catch_up_s, 1),
           "carried_tick_s": statistics.median(carried), "carried_runs_s": carried, "cursor_bytes": len(cursor),
           "backlog_batches": backlog_rows(url, cursor), "store_bytes": store_bytes(url), "skip_reason": reason,
           "load_avg_1m": os.getloadavg()[0]}  # fmt: skip
    return row, cursor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    load_start, t_start = os.getloadavg()[0], time.time()
    base = Settings().postgres_url
    database = f"trigger_tick_{int(time.time())}"
    admin = psycopg2.connect(base)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    url = base.rsplit("/", 1)[0] + f"/{database}"
    rows, cursor = [], None
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as home:
            sa_url = url.replace("postgresql://", "postgresql+psycopg2://", 1)
            Path(home, "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {sa_url}\n")
            instance = dg.DagsterInstance.from_config(home)
            make_templates(instance)
            loader = Loader(url)
            loader.capture()
            loaded = 1
            for size in sizes:
                t0 = time.perf_counter()
                loader.load(loaded, size)
                loaded = size
                print(f"{size:,} batches loaded in {time.perf_counter() - t0:.0f} s", flush=True)
                row, cursor = measure(instance, url, size, args.repeats, cursor)
                rows.append(row)
                print(f"{size:,}: {row}", flush=True)
            instance.dispose()
            loader.conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")
            cur.execute(f'DROP DATABASE IF EXISTS "{database}"')
        admin.close()
    result = {"command": "python bench/trigger_tick.py " + " ".join(sys.argv[1:]), "code": str(REPO),
              "host": host(load_start), "wall_s": round(time.time() - t_start, 1), "rows": rows}  # fmt: skip
    write(args.out, result)
    print(f"\nCheckpoint trigger, every batch untrained ({load_line(result)})\n")
    print_table(
        ["untrained batches", "ticks to count them", "their time", "carried tick (10 new)", "cursor", "batches kept"],
        ["r"] * 6,
        [[f"{r['batches']:,}", str(r["catch_up_ticks"]), f"{r['catch_up_s']:.0f} s",
          f"{r['carried_tick_s'] * 1000:,.0f} ms", f"{r['cursor_bytes']:,} B", f"{r['backlog_batches']:,}"]
         for r in rows],
    )  # fmt: skip
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
