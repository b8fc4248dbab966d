"""How long the local stack takes to start and stop, and how much CPU it burns doing so.

Runs on a throw-away state dir and its own ports, so the shared stack is untouched:

    .venv/bin/python bench/stack_bench.py [--runs 1] [--services kafka,s3,mlflow]

Prints a markdown table and writes bench/results/stack.json. CPU seconds (user+sys of the stack's processes and their
children when `up` returns) are the load-independent figure; wall time depends on what else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from pipeline_project.stack import Stack, StackConfig, parse_services

RESULTS = Path(__file__).resolve().parent / "results" / "stack.json"


def cpu_by_process(stack: Stack, services: list[str]) -> dict[str, float]:
    """user+sys seconds of each stack process, its children included."""
    result = {}
    for mp in stack.processes(services):
        proc = mp.process()
        if proc is None:
            continue
        total = 0.0
        for p in [proc, *proc.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        result[mp.name] = total
    return result


def stack_cpu_seconds(stack: Stack, services: list[str], row: dict[str, float], prefix: str) -> float:
    per_process = cpu_by_process(stack, services)
    for name, seconds in per_process.items():
        row[f"{prefix}_cpu_{name}_s"] = seconds
    return sum(per_process.values())


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def one_run(services: list[str], base_port: int) -> dict[str, float]:
    state = Path(tempfile.mkdtemp(prefix="stack-bench-"))
    config = StackConfig(
        state_dir=state,
        kafka_ports=(base_port + 92, base_port + 93, base_port + 94),
        kafka_controller_ports=(base_port + 192, base_port + 193, base_port + 194),
        s3_port=base_port,
        mlflow_port=base_port + 500,
    )
    stack = Stack(config)
    row: dict[str, float] = {}
    try:
        row["cold_up_s"], _ = timed(lambda: stack.up(services, timeout=600))
        row["cold_up_cpu_s"] = stack_cpu_seconds(stack, services, row, "cold_up")
        row["idempotent_up_s"], started = timed(lambda: stack.up(services, timeout=60))
        assert started == [], started
        row["status_s"], statuses = timed(lambda: stack.status(services))
        assert all(s.healthy for s in statuses)
        row["down_s"], _ = timed(lambda: stack.down(services))
        row["warm_up_s"], _ = timed(lambda: stack.up(services, timeout=600))
        row["warm_up_cpu_s"] = stack_cpu_seconds(stack, services, row, "warm_up")
        row["down_wipe_s"], _ = timed(lambda: stack.down(services, wipe=True))
        leftovers = [mp.name for mp in stack.processes(services) if mp.is_running()]
        assert not leftovers, leftovers
    finally:
        stack.down(services, wipe=True)
        shutil.rmtree(state, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--services", default="kafka,s3,mlflow")
    parser.add_argument("--base-port", type=int, default=26000, help="below 32768, away from the ephemeral range")
    args = parser.parse_args()
    services = parse_services(args.services)

    load_before = os.getloadavg()[0]
    kafka = Stack().services["kafka"]
    cds_before = kafka.cds_archive.exists()
    runs = [one_run(services, args.base_port) for _ in range(args.runs)]
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    result = {
        "services": services,
        "runs": runs,
        "median": medians,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": os.getloadavg()[0],
        "kafka_cds_archive_at_start": cds_before,
        "command": f"bench/stack_bench.py --runs {args.runs} --services {args.services}",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))

    print(
        f"Stack start/stop ({', '.join(services)}), {args.runs} run(s), {os.cpu_count()} CPUs, "
        f"load {load_before:.1f} -> {result['load_avg_1m_after']:.1f}, Kafka CDS archive present: {cds_before}\n"
    )
    print("| step | median |")
    print("|---|---|")
    for key, value in medians.items():
        print(f"| {key} | {value:.1f} |")


if __name__ == "__main__":
    main()
