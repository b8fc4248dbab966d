"""Streaming benchmarks: the project's Kafka data path vs the seed's approach and Kafka's own tools.

Run (the local 3-broker stack must be up: `.venv/bin/pipeline-project stack up`):

    .venv/bin/python bench/streaming_bench.py            # prints a markdown table
                                                          # writes bench/results/streaming.json

Every comparison runs side by side in this one run, on the same cluster and the same corpus
(../shared/corpus), and reports the median of `--repeats` runs and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_results  # noqa: E402
import seed_baseline  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402

from pipeline_project.settings import Settings  # noqa: E402
from pipeline_project.stack.discovery import with_local_s3  # noqa: E402
from pipeline_project.streaming.kafka.client import KafkaSettings  # noqa: E402
from pipeline_project.streaming.kafka.format import max_blocks_per_message  # noqa: E402
from pipeline_project.streaming.kafka.topics import ensure_topic  # noqa: E402
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig  # noqa: E402
from pipeline_project.streaming.produce.packing import BlockPacker  # noqa: E402
from pipeline_project.streaming.produce.producer import produce_blocks  # noqa: E402
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest  # noqa: E402
from pipeline_project.streaming.tokenizer import load_tokenizer  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpus"
JARS = REPO / "deploy" / "local" / "kafka" / "target" / "jars"
MIB = 1024 * 1024


def read_corpus(limit_bytes: int) -> list[str]:
    """Documents from .txt (one per file) and .jsonl ("text" per line), sorted paths, up to limit_bytes."""
    docs, total = [], 0
    for path in sorted(CORPUS.rglob("*")):
        if path.suffix == ".txt":
            texts = [path.read_bytes().decode("utf-8", errors="replace")]
        elif path.suffix == ".jsonl":
            texts = [
                json.loads(line).get("text") or ""
                for line in path.read_text("utf-8", errors="replace").splitlines()
                if line.strip()
            ]
        else:
            continue
        for t in texts:
            if t.strip():
                docs.append(t)
                total += len(t.encode())
        if total >= limit_bytes:
            break
    return docs


def java_tool(main: str, *args: str, timeout: float = 600) -> str:
    cmd = ["java", "-Xmx1g", "-cp", f"{JARS}/*", main, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{main} failed: {out.stderr[-2000:]}")
    return out.stdout


def new_topic(kafka: KafkaSettings, prefix: str, partitions: int = 8) -> str:
    name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), name, partitions=partitions, replication_factor=3, min_insync_replicas=2)
    return name


class ImplausibleReferenceError(RuntimeError):
    """A reference tool did not do what it was asked to (read fewer messages, waited out its timeout)."""


class _Tok:
    def __init__(self, info):
        self.name, self.hash = info.name, info.hash


def median(xs):
    return statistics.median(xs)


# -- 4. tokenize-and-pack vs encode_batch -----------------------------------------------------


def bench_tokenize(tok, docs, seq_len, batch_docs, repeats):
    backend = tok.tokenizer.backend_tokenizer
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    batches = [docs[i : i + batch_docs] for i in range(0, len(docs), batch_docs)]
    raw, ours, blocks_out = [], [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = 0
        for b in batches:
            n += sum(len(e.ids) for e in encode(b, add_special_tokens=False))
        raw.append(n / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        packer = BlockPacker(seq_len, tok.eos_id)
        out = []
        for b in batches:
            blocks = packer.add(tok.encode_batch(b))
            if len(blocks):
                out.append(blocks)
        ours.append(n / (time.perf_counter() - t0))
        blocks_out = np.concatenate(out)
    return {
        "encode_batch_tokens_per_s": median(raw),
        "tokenize_pack_tokens_per_s": median(ours),
        "ratio": median(ours) / median(raw),
        "tokens": n,
    }, blocks_out


# -- 3. produce vs ProducerPerformance --------------------------------------------------------


def bench_produce(kafka, tok, blocks, seq_len, produce_mb, repeats):
    per_msg = max_blocks_per_message(seq_len)
    record_size = per_msg * seq_len * 4
    n_blocks = int(produce_mb * MIB // (seq_len * 4))
    data = np.resize(blocks, (n_blocks, seq_len))  # repeat the corpus blocks up to the size
    n_records = -(-n_blocks // per_msg)
    ours, java = [], []
    for _ in range(repeats):
        topic = new_topic(kafka, "produce")
        chunks = (data[i : i + per_msg] for i in range(0, n_blocks, per_msg))
        t0 = time.perf_counter()
        report = produce_blocks(
            kafka,
            ProduceRequest(
                topic=topic,
                ledger_key=uuid.uuid4().hex,
                content_hash="bench",
                source="bench",
                seq_len=seq_len,
                tokenizer=tok,
                config=ProducerConfig(statistics_interval_ms=0),
            ),
            chunks,
        )
        ours.append(report.bytes / MIB / (time.perf_counter() - t0))
        topic = new_topic(kafka, "producer-perf")
        out = java_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(n_records),
            "--record-size",
            str(record_size),
            "--throughput",
            "-1",
            "--transactional-id",
            f"perf-{uuid.uuid4().hex[:8]}",
            "--transaction-duration-ms",
            "600000",
            "--producer-props",
            f"bootstrap.servers={kafka.bootstrap_servers}",
            "acks=all",
            "compression.type=lz4",
            "linger.ms=50",
            "batch.size=1048576",
            "max.request.size=1048576",
            "enable.idempotence=true",
        )
        sent = int(re.findall(r"(\d+) records sent", out)[-1])
        if sent != n_records:
            raise ImplausibleReferenceError(f"ProducerPerformance sent {sent} records, asked for {n_records}")
        java.append(float(re.findall(r"\(([\d.]+) MB/sec\)", out)[-1]))
    return {
        "ours_mib_per_s": median(ours),
        "producer_perf_mib_per_s": median(java),
        "ratio": median(ours) / median(java),
        "record_bytes": record_size,
        "records": n_records,
        "compression": "lz4",
        "acks": "all",
        "transactional": True,
    }


# -- 2. raw consume vs ConsumerPerformance ----------------------------------------------------


def partitions_of(kafka, topic):
    c = kafka.make_consumer()
    md = c.list_topics(topic, timeout=10).topics[topic]
    c.close()
    return sorted(md.partitions)


def raw_consume(kafka, topic, partitions):
    """Read the topic once, read_committed, from offset 0 to each partition's end: (MiB/s, messages, bytes).

    The offsets are no message count: bounded transactions leave a commit marker per transaction and partition."""
    c = kafka.make_consumer(overrides={"enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    nbytes = got = eofs = 0
    t0 = time.perf_counter()
    while eofs < len(partitions):
        for m in c.consume(num_messages=1024, timeout=1.0):
            if m.error():
                eofs += 1
                continue
            nbytes += len(m.value())
            got += 1
    sec = time.perf_counter() - t0
    c.close()
    return nbytes / MIB / sec, got, nbytes


def consumer_perf_row(out: str, n_msgs: int, n_bytes: int) -> dict[str, float]:
    """ConsumerPerformance's result row by column name; raises unless it read exactly the messages it was asked for.

    A tool asked for more messages than the topic holds reads them all, then waits out `--timeout`: its MB/s is
    then mostly waiting (3.2 MiB/s instead of ~240 on 2026-12-05)."""
    lines = [r for r in out.strip().splitlines() if r.strip()]
    header = next((r for r in lines if r.startswith("start.time")), None)
    if header is None:
        raise ImplausibleReferenceError(f"ConsumerPerformance printed no result header: {out[-500:]!r}")
    row = dict(zip([h.strip() for h in header.split(",")], lines[-1].split(",")))
    got = int(float(row["data.consumed.in.nMsg"]))
    mib = float(row["data.consumed.in.MB"])
    if got != n_msgs or abs(mib - n_bytes / MIB) > 0.01 * n_bytes / MIB + 0.01:
        raise ImplausibleReferenceError(
            f"ConsumerPerformance read {got} messages / {mib:.1f} MB, asked for {n_msgs} / {n_bytes / MIB:.1f}"
        )
    return {k: float(row[k]) for k in ("fetch.MB.sec", "MB.sec", "fetch.time.ms", "rebalance.time.ms")}


def run_loader(kafka, topic, seq_len, batch_size, num_workers=1, state=None, max_batches=None):
    cfg = LoaderConfig(
        kafka=kafka,
        topic=topic,
        seq_len=seq_len,
        batch_size=batch_size,
        rank=0,
        world_size=1,
        num_workers=num_workers,
        idle_timeout_s=30,
    )
    loader = KafkaBlockLoader(cfg)
    if state is not None:
        loader.load_state_dict(state)
    t0 = time.perf_counter()
    first = None
    n = 0
    for batch in loader:
        first = first or time.perf_counter()
        n += batch.numel()
        if max_batches and n >= max_batches * batch.numel():
            break
    sec = time.perf_counter() - t0
    m = loader.metrics()
    st = loader.state_dict()
    loader.close()
    return n, sec, first - t0 if first else None, m, st


def bench_consume(kafka, topic, seq_len, batch_size, repeats):
    partitions = partitions_of(kafka, topic)
    _, n_msgs, n_bytes = raw_consume(kafka, topic, partitions)  # the real count (and a warm page cache)
    props = Path(tempfile.mkdtemp()) / "consumer.properties"
    props.write_text("isolation.level=read_committed\nfetch.max.bytes=67108864\nmax.partition.fetch.bytes=8388608\n")
    java, raw, loader, runs = [], [], [], []
    for _ in range(repeats):
        out = java_tool(
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server",
            kafka.bootstrap_servers,
            "--topic",
            topic,
            "--messages",
            str(n_msgs),
            "--timeout",
            "60000",
            "--consumer.config",
            str(props),
            "--group",
            f"perf-{uuid.uuid4().hex[:8]}",
        )
        row = consumer_perf_row(out, n_msgs, n_bytes)
        java.append(row["fetch.MB.sec"])  # fetch.MB.sec: excludes the group join, stricter for us
        mib_s, got, got_bytes = raw_consume(kafka, topic, partitions)
        if (got, got_bytes) != (n_msgs, n_bytes):
            raise ImplausibleReferenceError(f"raw consume read {got} messages, {got_bytes} bytes; topic holds {n_msgs}")
        raw.append(mib_s)
        n, sec, _, _, _ = run_loader(kafka, topic, seq_len, batch_size)
        if not 0 <= n_bytes - n * 4 < batch_size * seq_len * 4 * len(partitions):  # at most partial batches short
            raise ImplausibleReferenceError(f"the loader delivered {n * 4} payload bytes, the topic holds {n_bytes}")
        loader.append(n * 4 / MIB / sec)  # payload bytes (uint32) delivered as ready int64 batches
        runs.append({"consumer_perf": row, "raw_mib_per_s": mib_s, "loader_mib_per_s": loader[-1]})
    return {
        "consumer_perf_fetch_mib_per_s": median(java),
        "ours_raw_consume_mib_per_s": median(raw),
        "ours_loader_mib_per_s": median(loader),
        "ratio_raw": median(raw) / median(java),
        "ratio_loader": median(loader) / median(java),
        "messages": n_msgs,
        "payload_bytes": n_bytes,
        "isolation": "read_committed",
        "runs": runs,
    }


# -- 1. delivered training tokens/s: loader vs seed -------------------------------------------


def bench_delivered(kafka, tok, topic, docs, seq_len, batch_size, repeats, seed_seconds, seed_mb):
    ours = []
    for _ in range(repeats):
        n, sec, _, _, _ = run_loader(kafka, topic, seq_len, batch_size)
        ours.append(n / sec)
    seed_topic = new_topic(kafka, "seed")
    lines, total = [], 0
    for d in docs:
        for line in d.splitlines():
            if line.strip():
                lines.append(line)
                total += len(line)
        if total > seed_mb * 1e6:
            break
    _, seed_bytes, seed_produce_s = seed_baseline.produce_lines(kafka.bootstrap_servers, seed_topic, lines)
    seed = []
    for _ in range(repeats):
        tokens, sec = seed_baseline.consume_batches(
            kafka.bootstrap_servers,
            seed_topic,
            tok.tokenizer,
            seq_len=seq_len,
            batch_size=batch_size,
            max_seconds=seed_seconds,
        )
        seed.append(tokens / sec)
    return {
        "ours_tokens_per_s": median(ours),
        "seed_tokens_per_s": median(seed),
        "ratio": median(ours) / median(seed),
        "seed_lines": len(lines),
        "seed_produce_mib_per_s": seed_bytes / MIB / seed_produce_s,
    }


# -- 5. resume cost ---------------------------------------------------------------------------


def bench_resume(kafka, topic, seq_len, batch_size, repeats):
    _n, _, _, _, end_state = run_loader(kafka, topic, seq_len, batch_size, max_batches=1)
    partitions = partitions_of(kafka, topic)
    c = kafka.make_consumer()
    highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    c.close()
    out = {}
    for label, frac in (("near_start", 0.01), ("deep", 0.95)):
        state = json.loads(json.dumps(end_state))
        state["current"] = None
        state["partitions"] = {str(p): {"offset": int(highs[p] * frac), "block": 0} for p in partitions}
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, _, _first, _, _ = run_loader(kafka, topic, seq_len, batch_size, state=state, max_batches=1)
            times.append(time.perf_counter() - t0)
        out[f"{label}_s"] = median(times)
        out[f"{label}_offset_fraction"] = frac
    out["ratio_deep_over_start"] = out["deep_s"] / out["near_start_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-mb", type=float, default=6.0)
    ap.add_argument("--topic-mb", type=float, default=192.0)
    ap.add_argument("--produce-mb", type=float, default=96.0)
    ap.add_argument("--seed-mb", type=float, default=2.0)
    ap.add_argument("--seed-seconds", type=float, default=20.0)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "streaming.json"))
    args = ap.parse_args()

    settings = with_local_s3(Settings())
    kafka = KafkaSettings.from_settings(settings)
    assert kafka.check_reachable() == 3, "the benchmarks need the 3-broker local stack"
    tok_info = load_tokenizer()
    tok = _Tok(tok_info)
    docs = read_corpus(int(args.corpus_mb * 1e6))
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    log(f"corpus: {len(docs)} docs, {sum(len(d.encode()) for d in docs) / 1e6:.1f} MB")

    load_start = os.getloadavg()[0]
    results = {"args": vars(args), "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    results["tokenize"], blocks = bench_tokenize(tok_info, docs, args.seq_len, 512, args.repeats)
    log("tokenize", results["tokenize"])
    results["produce"] = bench_produce(kafka, tok, blocks, args.seq_len, args.produce_mb, args.repeats)
    log("produce", results["produce"])

    topic = new_topic(kafka, "blocks")
    per_msg = max_blocks_per_message(args.seq_len)
    n_blocks = int(args.topic_mb * MIB // (args.seq_len * 4))
    data = np.resize(blocks, (n_blocks, args.seq_len))
    produce_blocks(
        kafka,
        ProduceRequest(
            topic=topic, ledger_key="bench", content_hash="bench", source="bench", seq_len=args.seq_len, tokenizer=tok
        ),
        (data[i : i + per_msg] for i in range(0, n_blocks, per_msg)),
    )
    results["topic"] = {"name": topic, "blocks": n_blocks, "mib": n_blocks * args.seq_len * 4 / MIB}

    results["consume"] = bench_consume(kafka, topic, args.seq_len, args.batch_size, args.repeats)
    log("consume", results["consume"])
    results["delivered"] = bench_delivered(
        kafka, tok_info, topic, docs, args.seq_len, args.batch_size, args.repeats, args.seed_seconds, args.seed_mb
    )
    log("delivered", results["delivered"])
    results["resume"] = bench_resume(kafka, topic, args.seq_len, args.batch_size, args.repeats)
    log("resume", results["resume"])

    # what a GPU would need: 6 * params FLOPs per token; a ~100M-param model on one H100 at
    # ~40% of 989 TFLOP/s bf16 consumes ~0.66M tokens/s
    gpu_need = 0.4 * 989e12 / (6 * 100e6)
    results["gpu"] = {
        "assumed_gpu_tokens_per_s_100M_model": gpu_need,
        "loader_tokens_per_s": results["delivered"]["ours_tokens_per_s"],
        "gpus_fed_per_loader": results["delivered"]["ours_tokens_per_s"] / gpu_need,
    }

    results["host"] = bench_results.host(load_start)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    r = results
    rows = [
        (
            "1. delivered training tokens/s (topic -> int64 batch)",
            f"{r['delivered']['ours_tokens_per_s']:,.0f}",
            f"seed (kafka-python + per-message tokenize): {r['delivered']['seed_tokens_per_s']:,.0f}",
            f"{r['delivered']['ratio']:.0f}x",
            ">= 100x",
        ),
        (
            "2. raw consume MiB/s (read_committed)",
            f"{r['consume']['ours_raw_consume_mib_per_s']:.1f} (loader {r['consume']['ours_loader_mib_per_s']:.1f})",
            f"ConsumerPerformance fetch: {r['consume']['consumer_perf_fetch_mib_per_s']:.1f}",
            f"{r['consume']['ratio_raw']:.2f}x (loader {r['consume']['ratio_loader']:.2f}x)",
            ">= 0.8x",
        ),
        (
            "3. produce MiB/s (RF3, acks=all, lz4, transactional)",
            f"{r['produce']['ours_mib_per_s']:.1f}",
            f"ProducerPerformance: {r['produce']['producer_perf_mib_per_s']:.1f}",
            f"{r['produce']['ratio']:.2f}x",
            ">= 0.8x",
        ),
        (
            "4. tokenize+pack tokens/s",
            f"{r['tokenize']['tokenize_pack_tokens_per_s']:,.0f}",
            f"encode_batch: {r['tokenize']['encode_batch_tokens_per_s']:,.0f}",
            f"{r['tokenize']['ratio']:.2f}x",
            ">= 0.9x",
        ),
        (
            "5. resume to first batch, s (1% vs 95% deep)",
            f"{r['resume']['near_start_s']:.3f} / {r['resume']['deep_s']:.3f}",
            "flat",
            f"{r['resume']['ratio_deep_over_start']:.2f}x",
            "flat, < 2 s",
        ),
    ]
    print(
        f"\nStreaming benchmarks (median of {args.repeats}; {os.cpu_count()} CPUs, 3 local brokers, seq_len {args.seq_len}, batch {args.batch_size})\n"
    )
    print("| comparison | ours | reference | ratio | goal |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        f"\nGPU rate: the loader sustains {r['gpu']['loader_tokens_per_s']:,.0f} tokens/s on one rank, "
        f"{r['gpu']['gpus_fed_per_loader']:.1f}x what one H100 training a 100M-param model consumes "
        f"(~{gpu_need:,.0f} tokens/s)."
    )
    print(bench_results.load_line(results))


if __name__ == "__main__":
    main()
