"""The project's Dagster paths at 10^4, 10^5 and 10^6 batches, on a PostgreSQL-backed instance.

A batch leaves what a real one leaves: its `batches` partition, its ingest run (tags: partition, batch, kind) and a
`token_blocks` materialization with real-size metadata; one run in 1,000 failed for good (no materialization). One
template of each is made through Dagster's own API; the rest are bulk-loaded (COPY) from the templates into a fresh
database on a PostgreSQL of its own (the stack's build, on a free port, stopped and wiped at the end). At each size every path is timed `--repeats` times (median; the cold
tick, which reads every batch, once at the largest size):

| path | what calls it |
|---|---|
| add one partition | `add_dynamic_partitions`: the intake sensor, per batch |
| has one partition | `has_dynamic_partition` |
| list every partition | `get_dynamic_partitions`: what `status` and `batches` read before this change |
| every materialized partition | `get_materialized_partitions(token_blocks)`: ditto |
| status: newest 500 batches | `batch_outcomes(limit=500)`: `pipeline-project status`, `batches` |
| batches --failed | `batch_outcomes(failed_only=True)` |
| one batch's outcome | `batch_outcomes(only={batch})`: the `batch_not_failed` check |
| trigger tick, carried | `untrained_backlog` with its state carried, 10 batches new since the last tick |
| trigger tick, first (budgeted) | the trigger's tick with nothing carried (a new lineage, a reset): reads for `TICK_BUDGET_S` |
| trigger: read every batch | `untrained_backlog` from nothing in one call (up to `--whole-cold-max` batches) |
| UI: partition stats | the asset page's `partitionStats` of `token_blocks` (GraphQL, the webserver's schema) |
| UI: partition statuses | the asset page's `assetPartitionStatuses` (every materialized / failed key) |
| UI: partition keys | `partitionKeys` (every key, what the partitions page lists) |

Also reported: the bytes of the carried state (the trigger's cursor) and the backlog's rows in its store (schema
`pipeline_backlog` of the same database) when every batch is untrained, and the database's size per batch.

    .venv/bin/python bench/dagster_scale.py [--sizes 10000,100000,1000000] [--repeats 3]

Writes bench/results/dagster_scale.json.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import dagster as dg  # noqa: E402
import psycopg2  # noqa: E402
from bench_results import host, load_line, print_table, write  # noqa: E402

from pipeline_project.defs.assets.backlog import BacklogState, untrained_backlog  # noqa: E402
from pipeline_project.defs.assets.backlog.store import PostgresBacklogStore  # noqa: E402
from pipeline_project.defs.instance import PARTITION_TAG, batch_outcomes  # noqa: E402
from pipeline_project.defs.partitions import batches  # noqa: E402
from pipeline_project.stack import Stack  # noqa: E402

RESULTS = REPO / "bench" / "results" / "dagster_scale.json"
TEMPLATE_BATCH = "b20261207T000000-template0000"
TEMPLATE_RUN = "7e3a1a7e-0000-4000-8000-000000000000"
FAILED_EVERY = 1000
PARTITIONS = 8


def batch_name(i: int) -> str:
    return f"b20261207T{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:012x}"[:29]


def run_id_of(i: int) -> str:
    h = f"{i:032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:]}"


def metadata(i: int) -> dict:
    """What `token_blocks` records for a batch (sizes as in bench/trigger_tick.py)."""
    ranges = {str(p): [i * 10, i * 10 + 9] for p in range(PARTITIONS)}
    table = "\n".join(f"| {p} | {a} | {b} | 10 |" for p, (a, b) in ranges.items())
    return {
        "tokens": 4_000_000,
        "offset_ranges": ranges,
        "offsets_table": dg.MetadataValue.md("| partition | first | last | offsets |\n|---|---|---|---|\n" + table),
        "kafka_stats": {k: 12345.6 for k in ("tx_bytes", "rx_bytes", "tx_msgs", "broker_rtt_avg_ms")},
        "stage_seconds": dict.fromkeys(("setup", "read", "tokenize", "pack", "encode", "produce"), 0.1),
        "topic": "token-blocks",
    }


def _copy_text(value) -> str:
    if value is None:
        return "\\N"
    text = value if isinstance(value, str) else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


class Loader:
    """Bulk-loads batches shaped like the templates (rows read back from the tables Dagster wrote)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg2.connect(url)
        self.templates: dict[str, tuple[list[str], list[tuple]]] = {}

    def capture(self) -> None:
        where = {
            "dynamic_partitions": ("partition = %s", TEMPLATE_BATCH),
            "runs": ("run_id = %s", TEMPLATE_RUN),
            "run_tags": ("run_id = %s", TEMPLATE_RUN),
            "event_logs": ("partition = %s AND dagster_event_type = 'ASSET_MATERIALIZATION'", TEMPLATE_BATCH),
        }
        with self.conn.cursor() as cur:
            for table, (clause, arg) in where.items():
                cur.execute(f"SELECT * FROM {table} WHERE {clause}", (arg,))
                columns = [d.name for d in cur.description if d.name != "id"]
                rows = [tuple(v for d, v in zip(cur.description, row) if d.name != "id") for row in cur.fetchall()]
                assert rows, f"no template row in {table}"
                self.templates[table] = (columns, rows)

    def load(self, start: int, end: int, chunk: int = 50_000) -> None:
        for lo in range(start, end, chunk):
            hi = min(end, lo + chunk)
            for table, (columns, rows) in self.templates.items():
                buf = io.StringIO()
                for i in range(lo, hi):
                    failed = i % FAILED_EVERY == 7
                    if table == "event_logs" and failed:
                        continue
                    subs = {TEMPLATE_BATCH: batch_name(i), TEMPLATE_RUN: run_id_of(i)}
                    if failed:
                        subs |= {"SUCCESS": "FAILURE"}
                    for row in rows:
                        fields = []
                        for value in row:
                            if isinstance(value, str):
                                for old, new in subs.items():
                                    value = value.replace(old, new)
                            fields.append(_copy_text(value))
                        buf.write("\t".join(fields) + "\n")
                buf.seek(0)
                with self.conn.cursor() as cur:
                    cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", buf)
            self.conn.commit()
        with self.conn.cursor() as cur:
            cur.execute("ANALYZE")
        self.conn.commit()

    def size_bytes(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_database_size(current_database())")
            return cur.fetchone()[0]


def make_templates(instance: dg.DagsterInstance) -> None:
    from dagster._core.test_utils import create_run_for_test

    instance.add_dynamic_partitions(batches.name, [TEMPLATE_BATCH])
    create_run_for_test(
        instance,
        job_name="ingest_batch",
        run_id=TEMPLATE_RUN,
        status=dg.DagsterRunStatus.SUCCESS,
        tags={PARTITION_TAG: TEMPLATE_BATCH, "pipeline/batch": TEMPLATE_BATCH, "pipeline/kind": "ingest"},
    )
    instance.report_runless_asset_event(dg.AssetMaterialization("token_blocks", partition=TEMPLATE_BATCH,
                                                                metadata=metadata(0)))  # fmt: skip


def timed(call: Callable[[], object], repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def measure(instance: dg.DagsterInstance, size: int, repeats: int, cold_repeats: int, whole_cold_max: int,
            store) -> dict:  # fmt: skip
    rows: dict[str, float] = {}
    fresh = [f"bnew-{size}-{uuid.uuid4().hex[:8]}-{k}" for k in range(repeats)]
    it = iter(fresh)
    rows["add one partition"], _ = timed(lambda: instance.add_dynamic_partitions(batches.name, [next(it)]), repeats)
    probe = batch_name(size // 2)
    rows["has one partition"], _ = timed(lambda: instance.has_dynamic_partition(batches.name, probe), repeats)
    rows["list every partition"], names = timed(lambda: instance.get_dynamic_partitions(batches.name), repeats)
    key = dg.AssetKey("token_blocks")
    rows["every materialized partition"], _ = timed(lambda: instance.get_materialized_partitions(key), repeats)
    rows["status: newest 500 batches"], newest = timed(lambda: batch_outcomes(instance, limit=500), repeats)
    rows["batches --failed"], failed = timed(lambda: batch_outcomes(instance, failed_only=True), repeats)
    rows["one batch's outcome"], _ = timed(lambda: batch_outcomes(instance, only={probe}), repeats)
    assert len(newest) == 500 and len(failed) == sum(1 for i in range(size) if i % FAILED_EVERY == 7), len(failed)
    from pipeline_project.defs.sensors.checkpoint_trigger import TICK_BUDGET_S

    rows["trigger tick, first (budgeted)"], first = timed(lambda: _cold_tick(instance, store, TICK_BUDGET_S), 1)
    if size <= whole_cold_max:
        rows["trigger: read every batch"], cold = timed(lambda: _cold_tick(instance, store), cold_repeats)
    else:
        cold = first
        while not cold[0].caught_up:  # the ticks that follow, until it has read every batch
            cold = (untrained_backlog(instance, cold[1], budget_s=TICK_BUDGET_S, store=store), cold[1])
    state = cold[1]
    for i in range(10):
        instance.report_runless_asset_event(dg.AssetMaterialization("token_blocks", partition=fresh[0],
                                                                    metadata=metadata(size + i)))  # fmt: skip
    rows["trigger tick, carried"], _ = timed(lambda: untrained_backlog(instance, state, store=store), repeats)
    rows |= ui_times(instance, repeats)
    return {
        "seconds": rows,
        "partitions": len(names),
        "untrained_batches": cold[0].batches,
        "first_tick_batches": first[0].batches,
        "carried_state_bytes": len(state.to_cursor()),
        "backlog_rows": store.size(state.scope),
    }


QUERY = '{ assetNodeOrError(assetKey: {path: ["token_blocks"]}) { ... on AssetNode { FIELDS } } }'
UI_QUERIES = {
    "UI: partition stats": "partitionStats { numMaterialized numPartitions numFailed numMaterializing }",
    "UI: partition statuses": "assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions "
    "failedPartitions materializingPartitions } }",
    "UI: partition keys": "partitionKeys",
}


def ui_times(instance: dg.DagsterInstance, repeats: int) -> dict[str, float]:
    """The asset page's queries against `instance`, through the webserver's GraphQL schema (a code server of the
    project's workspace.yaml, as `dagster dev` runs it)."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    out = {}
    with define_out_of_process_context(str(REPO / "workspace.yaml"), None, instance) as context:
        for name, fields in UI_QUERIES.items():
            query = QUERY.replace("FIELDS", fields)

            def ask(q=query):
                result = execute_dagster_graphql(context, q)
                assert not result.errors, result.errors

            out[name], _ = timed(ask, repeats)
    return out


def _cold_tick(instance: dg.DagsterInstance, store, budget_s: float | None = None):
    state = BacklogState()
    return untrained_backlog(instance, state, budget_s=budget_s, store=store), state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--whole-cold-max", type=int, default=100_000,
                        help="time reading every batch in one call up to this size (beyond: budgeted ticks)")  # fmt: skip
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    load_start = os.getloadavg()[0]
    t_start = time.time()
    from pipeline_project_harness.reliability.faults import free_ports

    stack = Stack(state_dir=Path(tempfile.mkdtemp(prefix="dagster-scale-")), postgres_port=free_ports(1)[0])
    stack.up(["postgres"], timeout=120)
    admin = psycopg2.connect(stack.config.postgres_url("postgres"))
    admin.autocommit = True
    database = f"dagster_scale_{int(time.time())}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    url = stack.config.postgres_url(database)
    results = []
    try:
        with tempfile.TemporaryDirectory() as home:
            sa_url = url.replace("postgresql://", "postgresql+psycopg2://", 1)
            Path(home, "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {sa_url}\n")
            instance = dg.DagsterInstance.from_config(home)
            make_templates(instance)
            loader = Loader(url)
            loader.capture()
            store = PostgresBacklogStore(url)  # the trigger's backlog, in the same server as in a deployment
            loaded = 0
            for size in sizes:
                t0 = time.perf_counter()
                loader.load(max(loaded, 1), size)
                load_s = time.perf_counter() - t0
                loaded = size
                cold_repeats = 1 if size == sizes[-1] else args.repeats
                row = measure(instance, size, args.repeats, cold_repeats, args.whole_cold_max, store)
                row |= {"batches": size, "load_s": round(load_s, 1), "db_bytes": loader.size_bytes(),
                        "load_avg_1m": os.getloadavg()[0]}  # fmt: skip
                results.append(row)
                print(f"{size:,} batches loaded in {load_s:.0f} s; measured (load {row['load_avg_1m']:.2f})",
                      flush=True)  # fmt: skip
            store.close()
            instance.dispose()
            loader.conn.close()
    finally:
        admin.close()
        stack.down(["postgres"], wipe=True)
    result = {
        "command": "python bench/dagster_scale.py " + " ".join(sys.argv[1:]),
        "host": host(load_start),
        "wall_s": round(time.time() - t_start, 1),
        "sizes": results,
    }
    write(RESULTS, result)
    paths = list(dict.fromkeys(p for r in results for p in r["seconds"]))
    print_table(
        ["path", *(f"{r['batches']:,} batches" for r in results)],
        ["l", *("r" for _ in results)],
        [[p, *(f"{r['seconds'][p] * 1000:,.0f} ms" if p in r["seconds"] else "-" for r in results)] for p in paths]
        + [["carried trigger state (all untrained)", *(f"{r['carried_state_bytes'] / 1e6:,.1f} MB" for r in results)],
           ["database per batch", *(f"{r['db_bytes'] / r['batches']:,.0f} B" for r in results)],
           ["load average (1 min) after", *(f"{r['load_avg_1m']:.2f}" for r in results)]],
    )  # fmt: skip
    print(f"\n{load_line(result)}; {result['wall_s']:.0f} s -> {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
