"""The raw sensor's cost per tick against the number of objects already under the prefix.

    .venv/bin/pipeline-project stack up --services s3
    .venv/bin/python bench/sensor_tick.py [--existing 10000 100000] [--new 10] [--repeats 5] [--full-repeats 2]

Fills `bench-sensor-<stamp>/raw/` on the stack's S3 server with sequence-numbered keys (an append-style layout),
the cursor taken past all of them, then drops `--new` objects after them and times one tick of the sensor's
planner (`listing.plan_tick`), counting ListObjectsV2 requests and keys returned. An append tick must stay flat as
the prefix grows. Then one key lands among the old ones and the full scan runs tick by tick, with the sensor's
default pages and seconds per tick, until it is done: the slowest tick must stay within Dagster's 60 s sensor
timeout at any prefix size, and the key must be found. Prints a table with the load average and writes
bench/results/sensor_tick.json.
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

from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.ingest.listing.plan import CURSOR_MARGIN_S, Limits, TickCursor, plan_tick, server_time
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


def settled_server_time(client, bucket: str, last_key: str) -> str:
    """The server's time once it is past the last filled object's LastModified by more than the cursor's
    margin, so that the cursor's claim (everything before `since` is taken) is true of the filled prefix."""
    newest = client.head_object(Bucket=bucket, Key=last_key)["LastModified"]
    while True:
        now = server_time(client.list_objects_v2(Bucket=bucket, Prefix=last_key, MaxKeys=1))
        if (now - newest).total_seconds() > CURSOR_MARGIN_S + 1:
            return now.isoformat()
        time.sleep(1)


def one_tick(client, bucket, prefix, cursor, limits, counter) -> dict:
    counter.reset()
    t0 = time.perf_counter()
    taken, after = plan_tick(client, bucket, prefix, cursor, limits)
    return {"s": time.perf_counter() - t0, "taken": [o.key for o in taken], "requests": counter.requests,
            "keys": counter.keys, "kind": after.kind, "cursor": after}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--existing", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--new", type=int, default=10, help="objects that arrive before each measured tick")
    parser.add_argument("--repeats", type=int, default=5, help="append ticks per size")
    parser.add_argument("--no-scan", action="store_true", help="time the append ticks only")
    args = parser.parse_args()

    settings = Stack().settings()  # the local stack's endpoint and keys
    client = settings.s3_client()
    bucket = settings.bucket
    prefix = f"bench-sensor-{time.strftime('%Y%m%dT%H%M%S')}/raw/"
    counter = RequestCounter(client)
    layout = PipelineLayout()
    # lookback 2 s (the default of Limits, not the sensor's 15 min): the bench's cursor claims the filled prefix is
    # taken without listing it into `recent`; the pages a scan reads are the same either way
    append_limits = Limits(max_objects=1000, max_bytes=256 << 20, full_scan_every=0)
    scan_limits = replace(append_limits, full_scan_every=1, scan_pages=layout.intake.full_scan_pages_per_tick,
                          scan_seconds=layout.intake.full_scan_seconds_per_tick)  # fmt: skip
    load = [round(x, 2) for x in os.getloadavg()]
    rows, filled = [], 0
    for existing in sorted(args.existing):
        t0 = time.perf_counter()
        fill(client, bucket, prefix, filled, existing)
        fill_s = time.perf_counter() - t0
        filled = existing
        # the state a long-running sensor is in: every existing key taken, a scan behind it
        now = settled_server_time(client, bucket, f"{prefix}{existing - 1:09d}.jsonl")
        cursor = TickCursor(since=now, start_after=f"{prefix}{existing - 1:09d}.jsonl")
        appends = []
        for _ in range(args.repeats):
            fill(client, bucket, prefix, filled, filled + args.new)
            filled += args.new
            tick = one_tick(client, bucket, prefix, cursor, append_limits, counter)
            assert tick["kind"] == "append" and len(tick["taken"]) == args.new, tick
            appends.append(tick)
            cursor = tick["cursor"]
        scan = []
        if not args.no_scan:
            late = f"{prefix}{existing // 2:09d}x.jsonl"  # sorts among the old keys: only the scan finds it
            client.put_object(Bucket=bucket, Key=late, Body=BODY)
            found = []
            while True:
                fill(client, bucket, prefix, filled, filled + args.new)
                filled += args.new
                tick = one_tick(client, bucket, prefix, cursor, scan_limits, counter)
                scan.append(tick)
                found += [k for k in tick["taken"] if k.endswith("x.jsonl")]
                old = [k for k in tick["taken"] if not k.endswith("x.jsonl") and k <= cursor.start_after]
                assert not old, f"the scan took keys it had taken before: {old[:3]}"
                cursor = tick["cursor"]
                print(f"  scan tick {len(scan)}: {tick['s']:.1f} s, {tick['requests']} calls", flush=True)
                if not cursor.scanning:
                    break
            assert found == [late], found
        row = {
            "existing": existing,
            "fill_s": round(fill_s, 1),
            "append_tick_ms_median": round(statistics.median(t["s"] for t in appends) * 1000, 1),
            "append_requests": appends[-1]["requests"],
            "append_keys_read": appends[-1]["keys"],
        }
        if scan:
            row.update({
                "scan_ticks": len(scan),
                "scan_tick_s_max": round(max(t["s"] for t in scan), 1),
                "scan_tick_s_median": round(statistics.median(t["s"] for t in scan), 1),
                "scan_s_total": round(sum(t["s"] for t in scan), 1),
                "scan_requests": sum(t["requests"] for t in scan),
                "scan_keys_read": sum(t["keys"] for t in scan),
                "late_key_found_on_tick": next(i + 1 for i, t in enumerate(scan) if any(
                    k.endswith("x.jsonl") for k in t["taken"])),
            })  # fmt: skip
        rows.append(row)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"partial": True, "new_per_tick": args.new, "rows": rows}, indent=1))
        print(f"{existing:>8} existing: append tick {row['append_tick_ms_median']} ms, "
              f"scan ticks {row.get('scan_ticks')}, slowest {row.get('scan_tick_s_max')} s")  # fmt: skip
    result = {"command": "python bench/sensor_tick.py --existing " + " ".join(str(e) for e in args.existing)
              + f" --repeats {args.repeats}" + (" --no-scan" if args.no_scan else ""),
              "scan_pages_per_tick": scan_limits.scan_pages, "scan_seconds_per_tick": scan_limits.scan_seconds,
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
    print("| existing objects | append tick (median) | ListObjectsV2 calls / keys read | scan: ticks | slowest tick "
          "| median tick | calls / keys | late key found on tick |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['existing']:,} | {r['append_tick_ms_median']} ms | {r['append_requests']} / {r['append_keys_read']} "
              f"| {r.get('scan_ticks')} | {r.get('scan_tick_s_max')} s | {r.get('scan_tick_s_median')} s "
              f"| {r.get('scan_requests')} / {r.get('scan_keys_read')} | {r.get('late_key_found_on_tick')} |")  # fmt: skip
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
