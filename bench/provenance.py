"""What provenance costs: span-header bytes per token, step-log bytes per token, and the time of a trace.

    .venv/bin/python bench/provenance.py                 # 8 MB of ../shared/corpus, no services
    .venv/bin/python bench/provenance.py --stack         # also trace steps against the running local stack

Index size: real documents of ../shared/corpus (code, English web, Chinese reviews, Gutenberg books), tokenized
with the DeepSeek tokenizer, FIM on code at 0.1, packed per domain at seq_len 4096 into messages of 128 KiB
(the layout's defaults); every message's `spans` header is encoded as the producer does. The step log is the
trainer's record of a run of `--batch` blocks per rank per step, drawn in the loader's order (messages dealt
round robin over 8 partitions, whole messages until the batch is full). Trace time (--stack): the documents are
published as a batch (shards + manifest in S3), produced to a fresh topic, a steps.json names `--steps` steps,
and `trace_step` is timed per step, first call (manifest and shards read) and later ones.
Writes bench/results/provenance.json and prints a markdown table and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_results

from pipeline_project.streaming.kafka.spans import SpanRecorder, decode_spans
from pipeline_project.streaming.produce.fim import FimApplier, FimPolicy, FimSentinels
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project.streaming.produce.staging import rechunk, split_item
from pipeline_project.streaming.tokenizer import load_tokenizer
from pipeline_project.training.step_log import runs_of

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SEQ_LEN, MESSAGE_BYTES, PARTITIONS = 4096, 128 * 1024, 8
SOURCES = [("code", "code/*.jsonl"), ("en_web", "web_noisy/*.jsonl"), ("zh_web", "zh_reviews/*.jsonl"),
           ("books", "en_gutenberg/*.txt")]  # fmt: skip


def documents(mb: float) -> list[tuple[str, str]]:
    """(domain, text) pairs, an equal share of `mb` per domain, interleaved as a batch would hold them."""
    per_domain = mb * 1e6 / len(SOURCES)
    pools = []
    for domain, pattern in SOURCES:
        docs, size = [], 0
        for path in sorted(CORPUS.glob(pattern)):
            raw = path.read_text(encoding="utf-8")
            texts = _jsonl_texts(raw) if path.suffix == ".jsonl" else [raw]
            for text in texts:
                docs.append((domain, text))
                size += len(text.encode())
                if size >= per_domain:
                    break
            if size >= per_domain:
                break
        pools.append(docs)
    out = []
    for i in range(max(len(p) for p in pools)):
        out += [p[i] for p in pools if i < len(p)]
    return out


def _jsonl_texts(raw: str) -> list[str]:
    texts = []
    for line in raw.split("\n"):
        try:
            texts.append(json.loads(line)["text"])
        except (ValueError, KeyError, TypeError):  # the noisy web files hold broken lines on purpose
            continue
    return texts


def index_size(docs: list[tuple[str, str]], tokenizer) -> dict:
    fim = FimApplier(FimPolicy.deepseek(), FimSentinels.of(tokenizer))
    packer, spans = DomainPackers(SEQ_LEN, tokenizer.eos_id), SpanRecorder(SEQ_LEN)
    per_message = MESSAGE_BYTES // (SEQ_LEN * 4)
    t0 = time.process_time()
    ids = []
    for i in range(0, len(docs), 256):
        part = docs[i : i + 256]
        ids.append((fim.encode([t for _, t in part], [d for d, _ in part], tokenizer.encode_batch), fim.last_chosen))
    tokenize_s = time.process_time() - t0
    header_bytes, n_spans, messages, tokens, record_s = 0, 0, [], 0, 0.0
    by_domain: dict[str, list[int]] = {}  # domain -> [header bytes, tokens, spans]

    def items():
        nonlocal record_s
        for i, (batch_ids, chosen) in enumerate(ids):
            part = docs[i * 256 : (i + 1) * 256]
            t = time.process_time()
            spans.note(batch_ids, [d for d, _ in part], chosen)
            record_s += time.process_time() - t
            yield from packer.add(batch_ids, [d for d, _ in part])
        yield from packer.flush()

    for item in rechunk(items(), per_message):
        domain, blocks = split_item(item)
        t = time.process_time()
        _, value = spans.header(domain, len(blocks))
        record_s += time.process_time() - t
        size = len(value) + len("spans") + 2  # key, value and their two length varints
        count = len(decode_spans(value)) if value[0] else 0
        header_bytes, n_spans, tokens = header_bytes + size, n_spans + count, tokens + blocks.size
        acc = by_domain.setdefault(domain, [0, 0, 0])
        acc[0], acc[1], acc[2] = acc[0] + size, acc[1] + blocks.size, acc[2] + count
        messages.append(len(blocks))
    return {"documents": len(docs), "tokens": tokens, "messages": len(messages), "spans": n_spans,
            "doc_tokens_mean": round(tokens / len(docs), 1), "span_header_bytes": header_bytes,
            "span_bytes_per_token": header_bytes / tokens, "span_bytes_per_payload_byte": header_bytes / (4 * tokens),
            "record_cpu_s": round(record_s, 3), "tokenize_cpu_s": round(tokenize_s, 3),
            "record_cpu_fraction_of_tokenize": round(record_s / tokenize_s, 4),
            "per_domain": {d: {"span_bytes_per_token": round(b / t, 5), "tokens_per_span": round(t / max(1, n), 1)}
                           for d, (b, t, n) in sorted(by_domain.items())},
            "message_blocks": messages}  # fmt: skip


def step_log_size(message_blocks: list[int], batch: int, seed: int = 0) -> dict:
    """The trainer's per-step runs for one rank drawing `batch` blocks per step from 8 partitions."""
    rng = np.random.default_rng(seed)
    queues = [[(p, o, n) for o, n in enumerate(message_blocks[p::PARTITIONS])] for p in range(PARTITIONS)]
    trace, steps = [], []
    while any(queues):
        p = int(rng.choice([i for i, q in enumerate(queues) if q]))
        part, offset, n = queues[p].pop(0)
        trace += [(part, offset, b) for b in range(n)]
    for i in range(0, len(trace) - batch + 1, batch):
        steps.append(runs_of(trace[i : i + batch]))
    body = json.dumps({str(s + 1): r for s, r in enumerate(steps)}, separators=(",", ":"))
    tokens = len(steps) * batch * SEQ_LEN
    return {"steps": len(steps), "batch_blocks": batch, "runs_per_step": round(sum(map(len, steps)) / len(steps), 2),
            "bytes_per_step": round(len(body) / len(steps), 1), "bytes_per_token": len(body) / tokens}  # fmt: skip


def trace_time(docs: list[tuple[str, str]], tokenizer, batch: int, steps: int) -> dict:
    from pipeline_project.cleaning.output.publish import ShardEntry, ShardManifest, iter_shard_documents, write_manifest
    from pipeline_project.cleaning.output.shards import write_shards
    from pipeline_project.cleaning.records import Document
    from pipeline_project.provenance.trace import read_messages, trace_step
    from pipeline_project.settings import Settings
    from pipeline_project.stack.discovery import with_local_s3
    from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
    from pipeline_project.streaming.produce.tokenize import tokenize_and_produce

    settings, run = with_local_s3(Settings()), uuid.uuid4().hex[:8]
    s3, bucket, kafka = settings.s3_client(), settings.bucket, KafkaSettings.from_settings(settings)
    batch_id, shards, topic = f"bench-prov-{run}", f"bench-prov-{run}/shards/", f"bench-prov-{run}"
    kept = [Document(id=f"raw/{d}.jsonl#{i + 1}", text=t, source=f"raw/{d}.jsonl", meta={"domain": d})
            for i, (d, t) in enumerate(docs)]  # fmt: skip
    entries = []
    for sh in write_shards(kept, 8 << 20):
        key = f"{shards}{batch_id}/{sh.name}"
        s3.put_object(Bucket=bucket, Key=key, Body=sh.data)
        entries.append(ShardEntry(key=key, docs=sh.docs, raw_bytes=sh.raw_bytes, bytes=len(sh.data), sha256=""))
    manifest = ShardManifest(batch_id=batch_id, config_version=5, config_hash="bench", input_keys=(),
                             counts={"in": len(kept), "kept": len(kept), "dropped": 0, "quarantined": 0},
                             shards=tuple(entries), exclusions="")  # fmt: skip
    write_manifest(s3, bucket, f"{shards}{batch_id}/", manifest)
    ensure_topic(kafka.make_admin(), topic, partitions=PARTITIONS, replication_factor=3)
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(
            topic=topic, ledger_key=batch_id, content_hash=run, source=batch_id, seq_len=SEQ_LEN, tokenizer=tokenizer
        ),
        iter_shard_documents(s3, bucket, manifest),
    )
    wanted = [(p, o) for p, (lo, hi) in sorted(report.offsets.items()) for o in range(lo, hi + 1)]
    messages = read_messages(kafka, topic, wanted)  # one transaction: the offsets of a range are all data
    positions = [(p, o, b) for p, o in wanted for b in range(len(messages[(p, o)].blocks))]
    ranks = [{str(s + 1): runs_of(positions[s * batch : (s + 1) * batch]) for s in range(steps)}]
    ckpt = f"s3://{bucket}/bench-prov-{run}/checkpoints/step-{steps}-x/"
    body = {"version": 1, "topic": topic, "seq_len": SEQ_LEN, "batch_size": batch, "world_size": 1,
            "previous": None, "first_step": 1, "last_step": steps, "ranks": ranks}  # fmt: skip
    s3.put_object(Bucket=bucket, Key=f"bench-prov-{run}/checkpoints/step-{steps}-x/provenance/steps.json",
                  Body=json.dumps(body).encode())  # fmt: skip
    times = []
    for s in range(1, steps + 1):
        t0 = time.perf_counter()
        traced = trace_step(kafka, s3, bucket, s, 0, checkpoint=ckpt, shards_prefix=shards)
        times.append(time.perf_counter() - t0)
        assert len(traced["blocks"]) == batch
    return {"blocks_per_step": batch, "steps": steps, "trace_s_each": [round(t, 3) for t in times],
            "produced_blocks": report.blocks}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=8.0)
    ap.add_argument("--batch", type=int, default=64, help="blocks per rank per step")
    ap.add_argument("--stack", action="store_true", help="also time trace_step against the running stack")
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    tokenizer = load_tokenizer()
    docs = documents(args.mb)
    size = index_size(docs, tokenizer)
    steps = step_log_size(size.pop("message_blocks"), args.batch)
    result = {"seq_len": SEQ_LEN, "message_bytes": MESSAGE_BYTES, "mb": args.mb, "spans": size, "step_log": steps}
    if args.stack:
        result["trace"] = trace_time(docs, tokenizer, min(args.batch, 32), args.steps)
    result["host"] = bench_results.host(load_start)
    rows = [["span header bytes / token", f"{size['span_bytes_per_token']:.5f}"],
            ["span header / token payload", f"{100 * size['span_bytes_per_payload_byte']:.3f} %"],
            ["mean document tokens", f"{size['doc_tokens_mean']:,}"],
            *[[f"  {d}: bytes / token (tokens / span)", f"{c['span_bytes_per_token']:.5f} ({c['tokens_per_span']:,})"]
              for d, c in size["per_domain"].items()],
            ["span recording CPU / tokenizing CPU", f"{100 * size['record_cpu_fraction_of_tokenize']:.2f} %"],
            [f"step log bytes / step ({args.batch} blocks)", f"{steps['bytes_per_step']:,}"],
            ["step log bytes / token", f"{steps['bytes_per_token']:.6f}"]]  # fmt: skip
    if "trace" in result:
        t = result["trace"]["trace_s_each"]
        rows += [["trace_step, first (s)", f"{t[0]:.3f}"], ["trace_step, later (s, mean)", f"{np.mean(t[1:]):.3f}"]]
    bench_results.print_table(["figure", "value"], ["l", "r"], rows)
    print(bench_results.load_line(result))
    bench_results.write(Path(__file__).resolve().parent / "results" / "provenance.json", result)


if __name__ == "__main__":
    main()
