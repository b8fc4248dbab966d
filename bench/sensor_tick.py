"""The raw sensor's cost per tick against the number of objects already under the prefix.

    .venv/bin/pipeline-project stack up --services s3
    .venv/bin/python bench/sensor_tick.py [--existing 10000 100000] [--new 10] [--repeats 5] [--full-repeats 2]

Fills `bench-sensor-<stamp>/raw/` on the stack's S3 server with sequence-numbered keys (an append-style layout),
the cursor taken past all of them, then drops `--new` objects after them and times one tick of the sensor's
planner (`listing.plan_tick`, with the sensor's own whole-prefix listing), counting ListObjectsV2 requests and keys
returned. An append tick must stay flat as the prefix grows; the full tick (every `full_scan_every` ticks) grows
with it. Prints a table with the load average and writes bench/results/sensor_tick.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from dagster_aws.s3.sensor import get_objects

from pipeline_project.listing import Limits, TickCursor, plan_tick
from pipeline_project.stack import Stack

RESULTS = Path(__file__).resolve().parent / "results" / "sensor_tick.json"
BODY = b'{"text": "x"}\n'


class RequestCounter:
    def __init__(self, client):
        self.requests = self.keys = 0
        client.meta.events.register("after-call.s3.ListObjectsV2", self._count)

    def _count(self, parsed, **_):
        self.requests += 1
        self.keys += len(parsed.get("Contents", []))

    def reset(self):
        self.requests = self.keys = 0


def fill(client, bucket: str, prefix: str, start: int, stop: int) -> None:
    def put(i: int) -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}{i:09d}.jsonl", Body=BODY)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(start, stop)))


def one_tick(client, bucket, prefix, cursor, limits, counter) -> dict:
    def list_all(since):
        return get_objects(bucket, prefix=prefix, since_last_modified=since, client=client)

    counter.reset()
    t0 = time.perf_counter()
    taken, after = plan_tick(client, bucket, prefix, cursor, limits, list_all)
    return {"s": time.perf_counter() - t0, "taken": len(taken), "requests": counter.requests, "keys": counter.keys,
            "kind": after.kind, "cursor": after}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--new", type=int, default=10, help="objects that arrive before each measured tick")
    parser.add_argument("--repeats", type=int, default=5, help="append ticks per size")
    parser.add_argument("--full-repeats", type=int, default=0, help="full-listing ticks per size (0: repeats // 2)")
    parser.add_argument(
        "--full-max-existing",
        type=int,
        default=None,
        help="measure the full listing only up to this many objects (s3proxy's is O(n^2) in pages)",
    )
    args = parser.parse_args()

    settings = Stack().settings()  # the local stack's endpoint and keys
    client = settings.s3_client()
    bucket = settings.bucket
    prefix = f"bench-sensor-{time.strftime('%Y%m%dT%H%M%S')}/raw/"
    counter = RequestCounter(client)
    append_limits = Limits(max_objects=1000, max_bytes=256 << 20, full_scan_every=40)
    full_limits = replace(append_limits, full_scan_every=1)
    load = [round(x, 2) for x in os.getloadavg()]
    rows, filled = [], 0
    for existing in sorted(args.existing):
        t0 = time.perf_counter()
        fill(client, bucket, prefix, filled, existing)
        fill_s = time.perf_counter() - t0
        filled = existing
        # the state a long-running sensor is in: every existing key taken, a full listing behind it
        cursor = TickCursor(since="2000-01-01T00:00:00+00:00", start_after=f"{prefix}{existing - 1:09d}.jsonl")
        appends, fulls = [], []
        for _ in range(args.repeats):
            fill(client, bucket, prefix, filled, filled + args.new)
            filled += args.new
            tick = one_tick(client, bucket, prefix, cursor, append_limits, counter)
            assert tick["kind"] == "append" and tick["taken"] == args.new, tick
            appends.append(tick)
            cursor = tick["cursor"]
        full_runs = args.full_repeats or max(1, args.repeats // 2)
        if args.full_max_existing is not None and existing > args.full_max_existing:
            full_runs = 0
        for _ in range(full_runs):
            tick = one_tick(client, bucket, prefix, cursor, full_limits, counter)
            assert tick["kind"] == "full", tick
            fulls.append(tick)
        row = {
            "existing": existing,
            "fill_s": round(fill_s, 1),
            "append_tick_ms_median": round(statistics.median(t["s"] for t in appends) * 1000, 1),
            "append_requests": appends[-1]["requests"],
            "append_keys_read": appends[-1]["keys"],
            "full_tick_ms_median": round(statistics.median(t["s"] for t in fulls) * 1000, 1) if fulls else None,
            "full_requests": fulls[-1]["requests"] if fulls else None,
            "full_keys_read": fulls[-1]["keys"] if fulls else None,
        }
        rows.append(row)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"partial": True, "new_per_tick": args.new, "rows": rows}, indent=1))
        print(
            f"{existing:>8} existing: append tick {row['append_tick_ms_median']} ms, full {row['full_tick_ms_median']} ms"
        )
    result = {"command": "python bench/sensor_tick.py --existing " + " ".join(str(e) for e in args.existing)
              + f" --repeats {args.repeats} --full-repeats {args.full_repeats}"
              + (f" --full-max-existing {args.full_max_existing}" if args.full_max_existing is not None else ""),
              "new_per_tick": args.new, "repeats": args.repeats, "prefix": prefix,
              "load_avg": {"start": load, "end": [round(x, 2) for x in os.getloadavg()]}, "rows": rows}  # fmt: skip
    if len(rows) > 1:
        result["append_last_over_first"] = round(
            rows[-1]["append_tick_ms_median"] / rows[0]["append_tick_ms_median"], 2
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1))
    print(f"\nload average {load[0]} -> {result['load_avg']['end'][0]} (1 min), {os.cpu_count()} CPUs, "
          f"{args.new} new objects per tick")  # fmt: skip
    print(
        "| existing objects | append tick (median) | ListObjectsV2 calls / keys read | full listing tick | calls / keys |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['existing']:,} | {r['append_tick_ms_median']} ms | {r['append_requests']} / {r['append_keys_read']} "
              f"| {r['full_tick_ms_median']} ms | {r['full_requests']} / {r['full_keys_read']} |")  # fmt: skip
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
