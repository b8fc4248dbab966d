"""Objects registered per second through the raw S3 sensor, against a bare ListObjectsV2 loop over the same keys.

    .venv/bin/python bench/intake.py [--objects 100000] [--prefixes 4] [--late 20] [--shared]

Starts an S3 server of its own (the local stack's s3proxy on a free port, under a temp dir, stopped and wiped at
the end; `--shared`: the running local stack's instead), uploads `--objects` small objects spread over
`--prefixes` source prefixes (`raw/p0/`, `raw/p1/`, ...), then:

- **bare listing**: `list_objects_v2` page by page over the raw prefix, nothing else: the floor of any sensor.
- **sensor**: the real `raw_s3_sensor` function, ticked back to back with `build_sensor_context` over a throwaway
  Dagster instance (whose partitions it fills, as the daemon does), with the default `IntakeConfig`, until a tick
  registers nothing. Every object must land in exactly one batch. Objects per second counts the ticks' time only
  (the daemon waits `--interval` s between ticks on top; here it is slept, not counted).
- **latency**: `--late` objects uploaded one every `--late-every` s while the sensor works through the backlog;
  upload -> registered is from the end of the PUT to the end of the tick that registered it (intervals included).

Prints a table with the load average and writes bench/results/intake.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "intake.json"
BODY = b'{"text": "x"}\n'


def upload(client, bucket: str, keys: list[str]) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=BODY), keys))
    return time.perf_counter() - t0


def bare_listing(client, bucket: str, prefix: str) -> tuple[int, float]:
    t0, n, token = time.perf_counter(), 0, None
    while True:
        kwargs = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
        if token:
            kwargs["ContinuationToken"] = token
        page = client.list_objects_v2(**kwargs)
        n += sum(not o["Key"].endswith("/") for o in page.get("Contents", []))  # s3proxy lists folders too
        if not page.get("IsTruncated"):
            return n, time.perf_counter() - t0
        token = page["NextContinuationToken"]


class LateUploads(threading.Thread):
    """Objects that land while the sensor works through the backlog, with the time each PUT returned."""

    def __init__(self, client, bucket: str, keys: list[str], every_s: float):
        super().__init__(daemon=True)
        self.client, self.bucket, self.keys, self.every_s = client, bucket, keys, every_s
        self.uploaded: dict[str, float] = {}

    def run(self) -> None:
        for key in self.keys:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=BODY)
            self.uploaded[key] = time.time()
            time.sleep(self.every_s)


def run_sensor(settings, prefix: str, late: LateUploads, interval_s: float, max_ticks: int = 10_000) -> dict:
    import dagster as dg

    from pipeline_project.definitions import defs
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
    from pipeline_project.ingest.manifest import read_manifest

    resources = {
        "s3": build_resources(settings)["s3"],
        "layout": PipelineLayout(bucket=settings.bucket, raw_prefix=prefix),
    }
    client = settings.s3_client()
    ticks, registered, cursor = [], {}, None
    with dg.instance_for_test() as instance:
        late.start()
        for _ in range(max_ticks):
            uploading = late.is_alive()
            t0 = time.perf_counter()
            with dg.build_sensor_context(
                instance=instance, cursor=cursor, resources=resources, definitions=defs
            ) as ctx:
                result = raw_s3_sensor(ctx)
            tick_s = time.perf_counter() - t0
            ids = [r.run_key for r in result.run_requests or []]
            if ids:
                instance.add_dynamic_partitions(batches.name, ids)
            done_at = time.time()
            objects = 0
            for b in ids:
                keys = [o.key for o in read_manifest(client, settings.bucket, b).objects]
                objects += len(keys)
                for k in keys:
                    registered.setdefault(k, []).append(done_at)
            cursor = result.cursor
            ticks.append({"s": round(tick_s, 3), "batches": len(ids), "objects": objects})
            print(f"  tick {len(ticks)}: {len(ids)} batches, {objects} objects, {tick_s:.2f} s", flush=True)
            if not ids and not uploading:
                break
            time.sleep(interval_s)
        late.join()
    return {"ticks": ticks, "registered": registered}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--prefixes", type=int, default=4)
    parser.add_argument("--late", type=int, default=20, help="objects uploaded while the backlog is taken")
    parser.add_argument("--late-every", type=float, default=0.25, help="seconds between them")
    parser.add_argument("--interval", type=float, default=15.0, help="the daemon's wait between ticks")
    parser.add_argument("--shared", action="store_true", help="the running local stack's S3, not one of its own")
    parser.add_argument(
        "--s3-backend",
        choices=("filesystem", "transient"),
        default="filesystem",
        help="the bench's own s3proxy store: the stack's filesystem one lists ~20 keys/s at 10^5 objects (each page "
        "scans the folder), so 10^5 runs on the in-memory one",
    )
    args = parser.parse_args()

    from pipeline_project.defs.resources.layout import IntakeConfig
    from pipeline_project.stack import Stack
    from pipeline_project.stack.config import StackConfig
    from pipeline_project_harness.reliability.faults import free_ports

    root = None
    if args.shared:
        stack = Stack()
    else:
        root = Path(tempfile.mkdtemp(prefix="bench-intake-"))
        port = free_ports(1)[0]
        config = StackConfig(state_dir=root / "state", s3_port=port, s3_backend=args.s3_backend, s3_heap="1g")
        stack = Stack(config)
        stack.up(["s3"], timeout=180)
    try:
        settings = stack.settings()
        client = settings.s3_client()
        prefix = f"bench-intake-{time.strftime('%Y%m%dT%H%M%S')}/raw/"
        keys = [f"{prefix}p{i % args.prefixes}/{i:09d}.jsonl" for i in range(args.objects)]
        load = [round(x, 2) for x in os.getloadavg()]
        upload_s = upload(client, settings.bucket, keys)
        print(f"uploaded {len(keys):,} objects in {upload_s:.1f} s", flush=True)

        listed, bare_s = bare_listing(client, settings.bucket, prefix)
        assert listed == len(keys), listed
        print(f"bare listing: {listed:,} keys in {bare_s:.2f} s", flush=True)

        late_keys = [f"{prefix}p{i % args.prefixes}/zz-late-{i:04d}.jsonl" for i in range(args.late)]
        late = LateUploads(client, settings.bucket, late_keys, args.late_every)
        sensor = run_sensor(settings, prefix, late, args.interval)
        registered = sensor["registered"]
        twice = [k for k, at in registered.items() if len(at) > 1]
        assert not twice, f"objects in two batches: {twice[:3]}"
        assert set(registered) == set(keys) | set(late_keys), "objects never registered"
        ticks = sensor["ticks"]
        busy = [t for t in ticks if t["batches"]]
        sensor_s = sum(t["s"] for t in busy)
        latencies = [registered[k][0] - late.uploaded[k] for k in late_keys]
        intake = IntakeConfig()
        per_tick = intake.max_objects_per_batch
        result = {
            "command": f"python bench/intake.py --objects {args.objects} --prefixes {args.prefixes} --late {args.late}"
            + f" --late-every {args.late_every} --interval {args.interval}"
            + (" --shared" if args.shared else ""),
            "objects": args.objects,
            "s3_backend": "shared stack" if args.shared else args.s3_backend,
            "prefixes": args.prefixes,
            "intake": intake.model_dump(),
            "upload_s": round(upload_s, 1),
            "bare_list_s": round(bare_s, 2),
            "bare_list_objects_per_s": round(listed / bare_s),
            "sensor_ticks": len(ticks),
            "sensor_busy_ticks": len(busy),
            "sensor_s": round(sensor_s, 2),
            "sensor_objects_per_s": round(len(registered) / sensor_s),
            "ratio_sensor_over_bare": round((len(registered) / sensor_s) / (listed / bare_s), 2),
            "batches": sum(t["batches"] for t in ticks),
            "slowest_tick_s": max(t["s"] for t in ticks),
            "late_objects": args.late,
            "late_latency_s": {
                "p50": round(percentile(latencies, 0.5), 2),
                "p95": round(percentile(latencies, 0.95), 2),
            },
            "one_batch_a_tick_minutes": round(args.objects / per_tick * args.interval / 60, 1),
            "ticks": ticks,
            "load_avg": {"start": load, "end": [round(x, 2) for x in os.getloadavg()]},
            "cpus": os.cpu_count(),
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=1))
        lat = result["late_latency_s"]
        print(
            f"\nload average {load[0]} -> {result['load_avg']['end'][0]} (1 min), {os.cpu_count()} CPUs; "
            f"{args.objects:,} objects under {args.prefixes} prefixes, {args.interval:g} s between ticks"
        )
        print("| | objects/s | seconds | ticks | batches | slowest tick | late upload -> registered p50 / p95 |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print(f"| bare `list_objects_v2` loop | {result['bare_list_objects_per_s']:,} | {bare_s:.2f} | | | | |")
        print(
            f"| `raw_s3_sensor` | {result['sensor_objects_per_s']:,} | {sensor_s:.2f} | {len(ticks)} "
            f"| {result['batches']} | {result['slowest_tick_s']} s | {lat['p50']} s / {lat['p95']} s |"
        )
        print(
            f"sensor / bare: {result['ratio_sensor_over_bare']}x (goal >= 0.5x); one batch a tick (before issue 38) "
            f"would take {args.objects // per_tick} ticks, {result['one_batch_a_tick_minutes']} min"
        )
        print(f"wrote {RESULTS}")
    finally:
        if root is not None:
            stack.down(wipe=True)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
