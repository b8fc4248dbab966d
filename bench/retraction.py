"""How long a retraction takes to reach a running loader: from the request written to the last retracted block any
rank still yields (prefetched batches included).

Run (the local stack must be up: `.venv/bin/pipeline-project stack up`):

    .venv/bin/python bench/retraction.py --trials 3     # table on stdout, bench/results/retraction.json

Each trial: a fresh one-partition topic of `--messages` messages; two ranks (loaders striping the partition, in
threads of this process) draw batches in streaming mode at `--step-s` per step, as a trainer would; once they are
under way, a request retracts every message from a little ahead of the ranks to the end. Measured: the seconds
from the write returning to the last batch that still held a retracted block (0 when none did), and the blocks
yielded after the request that were retracted (exposures). Goal: at most 60 s on the local stack.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_results  # noqa: E402
import numpy as np  # noqa: E402

from pipeline_project.settings import Settings  # noqa: E402
from pipeline_project.streaming.kafka.client import DeliveryTracker, KafkaSettings, flush_or_raise  # noqa: E402
from pipeline_project.streaming.kafka.format import encode_message  # noqa: E402
from pipeline_project.streaming.kafka.topics import ensure_topic  # noqa: E402
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig  # noqa: E402
from pipeline_project.streaming.retractions import BlockRange, Retraction  # noqa: E402
from pipeline_project.streaming.retractions.topic import write_retraction  # noqa: E402

SEQ_LEN, BLOCKS_PER_MESSAGE = 16, 4


def produce(kafka: KafkaSettings, topic: str, messages: int) -> None:
    producer, tracker = kafka.make_producer(), DeliveryTracker()
    rng = np.random.default_rng(0)
    for i in range(messages):
        blocks = rng.integers(0, 1000, size=(BLOCKS_PER_MESSAGE, SEQ_LEN), dtype=np.uint32)
        value, headers = encode_message(blocks, tokenizer_name="bench", tokenizer_hash="h", source=f"m{i}")
        producer.produce(topic, value=value, headers=headers, partition=0, on_delivery=tracker.on_delivery)
    flush_or_raise(producer, tracker)


def trial(kafka: KafkaSettings, args) -> dict:
    topic = f"bench-retract-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=1, replication_factor=3)
    produce(kafka, topic, args.messages)
    yielded: list[tuple[float, int]] = []  # (time, offset) of every block any rank yielded
    stop = threading.Event()

    def rank(r: int) -> None:
        cfg = LoaderConfig(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=2, rank=r, world_size=2,
                           mode="streaming", idle_timeout_s=5, trace=True, retraction_refresh_s=args.refresh_s)  # fmt: skip
        loader = KafkaBlockLoader(cfg)
        try:
            for _ in loader:
                now = time.monotonic()
                yielded.extend((now, offset) for _p, offset, _b in loader.trace)
                loader.trace.clear()
                if stop.is_set():
                    return
                time.sleep(args.step_s)
        finally:
            loader.close()

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    time.sleep(args.warmup_s)
    ahead = max((o for _, o in yielded), default=0) + 4
    request = Retraction(request_id=f"bench-{uuid.uuid4().hex[:8]}", reason="bench",
                         blocks=tuple(BlockRange(partition=0, offset=o) for o in range(ahead, args.messages)))  # fmt: skip
    write_retraction(kafka, topic, request)
    written = time.monotonic()
    time.sleep(args.refresh_s + args.observe_s)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    late = [t - written for t, o in yielded if t >= written and o >= ahead]
    after = [o for t, o in yielded if t >= written]
    kafka.make_admin().delete_topics([topic, f"{topic}.retractions"], operation_timeout=30)
    return {"latency_s": max(late, default=0.0), "exposed_blocks": len(late), "blocks_after_request": len(after),
            "retracted_messages": args.messages - ahead}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--step-s", type=float, default=0.05, help="seconds per training step of each rank")
    ap.add_argument("--refresh-s", type=float, default=10.0, help="LoaderConfig.retraction_refresh_s")
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--observe-s", type=float, default=10.0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "retraction.json"))
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    kafka = KafkaSettings.from_settings(Settings())
    trials = [trial(kafka, args) for _ in range(args.trials)]
    latencies = [t["latency_s"] for t in trials]
    result = {"args": vars(args), "trials": trials, "latency_s_median": statistics.median(latencies),
              "latency_s_max": max(latencies), "host": bench_results.host(load_start)}  # fmt: skip
    bench_results.write(Path(args.out), result)
    print(f"retraction reach, {args.trials} trials, refresh {args.refresh_s:g} s, {bench_results.load_line(result)}\n")
    bench_results.print_table(
        ["trial", "request -> last retracted block yielded", "retracted blocks yielded after the request"],
        ["l", "r", "r"],
        [[str(i + 1), f"{t['latency_s']:.2f} s", str(t["exposed_blocks"])] for i, t in enumerate(trials)],
    )
    print(f"\nmedian {result['latency_s_median']:.2f} s, max {result['latency_s_max']:.2f} s (goal <= 60 s)")


if __name__ == "__main__":
    main()
