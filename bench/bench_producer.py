"""Producer-side benchmarks (issue 4, comparisons 3 and 4), side by side in one run.

3. Produce MB/s: `produce_blocks` (transactional, idempotent, acks=all, lz4) against Kafka's own
   `ProducerPerformance` (kafka-producer-perf-test) from the stack's jars, same record size, acks,
   compression, linger/batch settings, and an RF 3 / min ISR 2 / 8-partition topic. Both get the
   same kind of payload (random uppercase letters, what the perf tool generates); ours is also
   run on real token blocks.
4. Tokenize-and-pack tokens/s against the tokenizer library's own `encode_batch` on the same text
   (ours = TokenizerInfo.encode_batch + BlockPacker), and the whole tokenize_and_produce chain.

Usage:  .venv/bin/python bench/bench_producer.py [--runs 3] [--produce-mb 100] [--text-mb 4]
Needs the local stack (`pipeline-project stack up`). Prints a markdown table, writes
bench/results/producer.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
from stack_bench import cpu_by_process

from pipeline_project.settings import Settings
from pipeline_project.stack import Stack
from pipeline_project.stack.discovery import with_local_s3
from pipeline_project.stack.kafka.cluster import tool_command
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import max_blocks_per_message
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.ledger.records import ledger_topic
from pipeline_project.streaming.produce.packing import BlockPacker
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.streaming.tokenizer import load_tokenizer

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
RESULTS = REPO / "bench" / "results"
SEQ_LEN = 4096
BATCH_DOCS = 512


def corpus_texts(limit_bytes: int) -> list[str]:
    """English books, Chinese reviews and poetry, code, web text: round-robin until limit_bytes."""
    sources: list[list[str]] = []
    books = [p.read_text(encoding="utf-8", errors="replace") for p in sorted((CORPUS / "en_gutenberg").glob("*.txt"))]
    sources.append(books)
    for sub in ("zh_reviews", "zh_classical", "code", "web_noisy"):
        docs = []
        for path in sorted((CORPUS / sub).glob("*.jsonl")):
            with path.open(encoding="utf-8") as f:
                docs.extend(json.loads(line).get("text") or "" for line in f)
        sources.append([d for d in docs if d])
    out, size, i = [], 0, 0
    while size < limit_bytes:
        src = sources[i % len(sources)]
        doc = src[(i // len(sources)) % len(src)]
        out.append(doc)
        size += len(doc.encode())
        i += 1
    return out


class CpuMeter:
    """CPU seconds over a block: this process (all its threads), the Kafka brokers, and the machine's idle cores."""

    def __init__(self) -> None:
        self.stack = Stack()

    def __enter__(self) -> CpuMeter:
        self._own, self._machine = time.process_time(), psutil.cpu_times()
        self._brokers = sum(cpu_by_process(self.stack, ["kafka"]).values())
        return self

    def __exit__(self, *exc) -> None:
        after = psutil.cpu_times()
        self.own_s = time.process_time() - self._own
        self.brokers_s = sum(cpu_by_process(self.stack, ["kafka"]).values()) - self._brokers
        self.idle_s = (after.idle + after.iowait) - (self._machine.idle + self._machine.iowait)

    def as_dict(self) -> dict:
        return {"own_cpu_s": self.own_s, "brokers_cpu_s": self.brokers_s, "machine_idle_core_s": self.idle_s}


def batches(texts: list[str], n: int) -> list[list[str]]:
    return [texts[i : i + n] for i in range(0, len(texts), n)]


def bench_tokenize(tok, texts: list[str]) -> dict:
    """One library pass and one of ours, back to back, on the same text batches."""
    backend = tok.tokenizer.backend_tokenizer
    text_batches = batches(texts, BATCH_DOCS)
    t0 = time.perf_counter()
    lib_tokens = 0
    with CpuMeter() as lib_cpu:
        for b in text_batches:
            lib_tokens += sum(len(e.ids) for e in backend.encode_batch_fast(b, add_special_tokens=False))
    lib_s = time.perf_counter() - t0

    packer = BlockPacker(SEQ_LEN, tok.eos_id)
    t0 = time.perf_counter()
    our_tokens = 0
    for b in text_batches:
        ids = tok.encode_batch(b)
        our_tokens += sum(len(a) for a in ids)
        packer.add(ids)
    packer.flush()
    ours_s = time.perf_counter() - t0
    assert our_tokens == lib_tokens, (our_tokens, lib_tokens)
    return {
        "tokens": lib_tokens,
        "library_tok_per_s": lib_tokens / lib_s,
        "ours_tok_per_s": our_tokens / ours_s,
        "ratio": lib_s / ours_s,
        "library_cpu": lib_cpu.as_dict(),
    }


def new_topic(ks: KafkaSettings, prefix: str) -> str:
    name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
    ensure_topic(ks.make_admin(), name, partitions=8, replication_factor=3, min_insync_replicas=2)
    return name


def drop_topics(ks: KafkaSettings, *names: str) -> None:
    admin = ks.make_admin()
    names = [n for t in names for n in (t, ledger_topic(t))]
    for fut in admin.delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(Exception):  # the ledger topic exists only when produce_blocks ran
            fut.result()


def bench_tokenize_and_produce(ks: KafkaSettings, tok, texts: list[str]) -> dict:
    topic = new_topic(ks, "tokprod")
    meter = CpuMeter()
    try:
        with meter:
            r = tokenize_and_produce(
                ks,
                ProduceRequest(
                    topic=topic,
                    ledger_key="bench",
                    content_hash=uuid.uuid4().hex,
                    source="bench",
                    seq_len=SEQ_LEN,
                    tokenizer=tok,
                    config=ProducerConfig(text_batch_docs=BATCH_DOCS),
                ),
                iter(texts),
            )
    finally:
        drop_topics(ks, topic)
    return {
        "tokens_in": r.packing["tokens_in"],
        "tok_per_s": r.packing["tokens_in"] / r.seconds,
        "tok_per_s_after_setup": r.packing["tokens_in"] / (r.seconds - r.stage_seconds["setup"]),
        "stage_seconds": r.stage_seconds,
        "seconds": r.seconds,
        "mb_per_s": r.mb_per_s,
        "cpu": meter.as_dict(),
    }


def letters_blocks(n_blocks: int, seed: int) -> np.ndarray:
    """Random A-Z bytes viewed as uint32 blocks: the perf tool's payload in our wire format."""
    raw = np.random.default_rng(seed).integers(65, 91, size=n_blocks * SEQ_LEN * 4, dtype=np.uint8)
    return raw.view("<u4").reshape(n_blocks, SEQ_LEN)


def token_blocks(tok, texts: list[str], n_blocks: int) -> np.ndarray:
    packer = BlockPacker(SEQ_LEN, tok.eos_id)
    got = [packer.add(tok.encode_batch(b)) for b in batches(texts, BATCH_DOCS)]
    real = np.concatenate(got)
    reps = -(-n_blocks // len(real))
    return np.concatenate([real] * reps)[:n_blocks]


class _Tok:
    name = "bench"
    hash = "0" * 64


def bench_ours(ks: KafkaSettings, blocks: np.ndarray, per_message: int) -> float:
    topic = new_topic(ks, "ours")
    try:
        chunks = (blocks[i : i + per_message] for i in range(0, len(blocks), per_message))
        r = produce_blocks(
            ks,
            ProduceRequest(
                topic=topic,
                ledger_key="bench",
                content_hash=uuid.uuid4().hex,
                source="bench",
                seq_len=SEQ_LEN,
                tokenizer=_Tok,
            ),
            chunks,
        )
        return r.mb_per_s
    finally:
        drop_topics(ks, topic)


def bench_perf_tool(ks: KafkaSettings, record_size: int, num_records: int) -> float:
    topic = new_topic(ks, "perftool")
    props = {
        "bootstrap.servers": ks.bootstrap_servers,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": "50",
        "batch.size": str(1 << 20),
        "max.request.size": str(1 << 20),
        "enable.idempotence": "true",
        "buffer.memory": str(64 << 20),
    }
    cmd = tool_command(
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        str(num_records),
        "--record-size",
        str(record_size),
        "--throughput",
        "-1",
        "--producer-props",
        *[f"{k}={v}" for k, v in props.items()],
    )
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True).stdout
    finally:
        drop_topics(ks, topic)
    final = [line for line in out.splitlines() if "records sent" in line][-1]
    rec_per_s = float(re.search(r"records sent, ([\d.]+) records/sec", final).group(1))
    return rec_per_s * record_size / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--produce-mb", type=float, default=100)
    ap.add_argument("--text-mb", type=float, default=4)
    args = ap.parse_args()

    settings = with_local_s3(Settings())
    ks = KafkaSettings.from_settings(settings)
    ks.check_reachable(10)
    load_start = os.getloadavg()[0]
    tok = load_tokenizer()
    texts = corpus_texts(int(args.text_mb * 1e6))
    per_message = max_blocks_per_message(SEQ_LEN)
    record_size = per_message * SEQ_LEN * 4
    n_messages = max(8, int(args.produce_mb * 1e6 // record_size))
    n_blocks = n_messages * per_message
    tokens_payload = token_blocks(tok, texts, n_blocks)

    keys = ("lib", "lib_cpu", "pack", "pack_ratio", "chain", "perf", "ours_letters", "ours_tokens")
    runs: dict[str, list] = {k: [] for k in keys}
    for i in range(args.runs):
        # the machine is shared: pair the library and our pass back to back and take the ratio per pair
        for _ in range(3):
            t = bench_tokenize(tok, texts)
            runs["lib"].append(t["library_tok_per_s"])
            runs["pack"].append(t["ours_tok_per_s"])
            runs["pack_ratio"].append(t["ratio"])
            runs["lib_cpu"].append(t["library_cpu"])
        chain = bench_tokenize_and_produce(ks, tok, texts)
        # the same tokens, so CPU seconds compare directly: what the chain costs this process, brokers left out
        chain["own_cpu_ratio_vs_previous_library_pass"] = runs["lib_cpu"][-1]["own_cpu_s"] / chain["cpu"]["own_cpu_s"]
        chain["ratio_vs_previous_library_pass"] = chain["tok_per_s"] / runs["lib"][-1]
        chain["ratio_after_setup_vs_previous_library_pass"] = chain["tok_per_s_after_setup"] / runs["lib"][-1]
        runs["chain"].append(chain)
        runs["perf"].append(bench_perf_tool(ks, record_size, n_messages))
        runs["ours_letters"].append(bench_ours(ks, letters_blocks(n_blocks, i), per_message))
        runs["ours_tokens"].append(bench_ours(ks, tokens_payload, per_message))
        print(f"run {i + 1}/{args.runs} done", flush=True)

    med = statistics.median
    chain_tps = med(c["tok_per_s"] for c in runs["chain"])
    chain_tps_steady = med(c["tok_per_s_after_setup"] for c in runs["chain"])
    stage = {k: med(c["stage_seconds"][k] for c in runs["chain"]) for k in runs["chain"][0]["stage_seconds"]}
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host": {"cpus": os.cpu_count(), "loadavg_1m_at_start": load_start, "loadavg_1m_at_end": os.getloadavg()[0]},
        "params": {
            "runs": args.runs,
            "seq_len": SEQ_LEN,
            "record_bytes": record_size,
            "messages": n_messages,
            "produce_mb": n_messages * record_size / 1e6,
            "text_mb": args.text_mb,
            "texts": len(texts),
        },
        "tokenize": {
            "library_encode_batch_tok_per_s": med(runs["lib"]),
            "ours_encode_and_pack_tok_per_s": med(runs["pack"]),
            "ratio_pack": med(runs["pack_ratio"]),  # median of back-to-back pair ratios
            "ours_tokenize_and_produce_tok_per_s": chain_tps,
            "ratio_chain": med(c["ratio_vs_previous_library_pass"] for c in runs["chain"]),
            "ours_tokenize_and_produce_after_setup_tok_per_s": chain_tps_steady,
            "ratio_chain_after_setup": med(c["ratio_after_setup_vs_previous_library_pass"] for c in runs["chain"]),
            "chain_stage_seconds_median": stage,
            "ratio_chain_own_cpu": med(c["own_cpu_ratio_vs_previous_library_pass"] for c in runs["chain"]),
            "library_cpu_median": {k: med(c[k] for c in runs["lib_cpu"]) for k in runs["lib_cpu"][0]},
            "chain_cpu_median": {k: med(c["cpu"][k] for c in runs["chain"]) for k in runs["chain"][0]["cpu"]},
        },
        "produce": {
            "perf_tool_mb_per_s": med(runs["perf"]),
            "ours_letters_mb_per_s": med(runs["ours_letters"]),
            "ours_tokens_mb_per_s": med(runs["ours_tokens"]),
            "ratio_letters": med(runs["ours_letters"]) / med(runs["perf"]),
            "ratio_tokens": med(runs["ours_tokens"]) / med(runs["perf"]),
        },
        "raw_runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "producer.json").write_text(json.dumps(result, indent=2))

    tk, pr = result["tokenize"], result["produce"]
    print(
        f"\nProducer benchmarks, median of {args.runs} runs ({result['params']['produce_mb']:.0f} MB produced per "
        f"variant, {args.text_mb:g} MB of corpus text, seq_len {SEQ_LEN}, record {record_size} B; load average "
        f"{load_start:.2f} -> {result['host']['loadavg_1m_at_end']:.2f} (1 min), {os.cpu_count()} CPUs)\n"
    )
    print("| comparison | ours | reference | ratio | goal |")
    print("|---|---|---|---|---|")
    print(
        f"| produce MB/s, same payload (random letters), RF3 acks=all lz4 | {pr['ours_letters_mb_per_s']:.1f} | "
        f"{pr['perf_tool_mb_per_s']:.1f} (kafka-producer-perf-test) | {pr['ratio_letters']:.2f}x | >= 0.8x |"
    )
    print(
        f"| produce MB/s, real token blocks | {pr['ours_tokens_mb_per_s']:.1f} | {pr['perf_tool_mb_per_s']:.1f} | "
        f"{pr['ratio_tokens']:.2f}x | >= 0.8x |"
    )
    print(
        f"| tokenize + pack tokens/s | {tk['ours_encode_and_pack_tok_per_s']:,.0f} | "
        f"{tk['library_encode_batch_tok_per_s']:,.0f} (tokenizers encode_batch) | {tk['ratio_pack']:.2f}x | >= 0.9x |"
    )
    print(
        f"| tokenize + pack + produce (transactional) tokens/s | {tk['ours_tokenize_and_produce_tok_per_s']:,.0f} | "
        f"{tk['library_encode_batch_tok_per_s']:,.0f} | {tk['ratio_chain']:.2f}x | >= 0.9x |"
    )
    print(
        f"| same, excluding the fixed per-call setup (ledger read, init_transactions) | "
        f"{tk['ours_tokenize_and_produce_after_setup_tok_per_s']:,.0f} | {tk['library_encode_batch_tok_per_s']:,.0f} | "
        f"{tk['ratio_chain_after_setup']:.2f}x | >= 0.9x |"
    )
    print(
        f"| same, CPU seconds of this process only (the brokers' left out): library / chain | "
        f"{tk['chain_cpu_median']['own_cpu_s']:.2f} s | {tk['library_cpu_median']['own_cpu_s']:.2f} s | "
        f"{tk['ratio_chain_own_cpu']:.2f}x | |"
    )
    lc, cc = tk["library_cpu_median"], tk["chain_cpu_median"]
    print(
        f"\nCPU (median): library pass: own {lc['own_cpu_s']:.2f} s, brokers {lc['brokers_cpu_s']:.2f} s, idle cores "
        f"{lc['machine_idle_core_s']:.2f} s; chain: own {cc['own_cpu_s']:.2f} s, brokers {cc['brokers_cpu_s']:.2f} s, "
        f"idle cores {cc['machine_idle_core_s']:.2f} s"
    )
    print("\nstage seconds of tokenize_and_produce (median): " + ", ".join(f"{k} {v:.2f}" for k, v in stage.items()))
    print(f"results: {RESULTS / 'producer.json'}")


if __name__ == "__main__":
    main()
