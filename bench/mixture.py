"""Mixture accuracy: realized domain proportions vs the target over 10,000 blocks, and exact resume.

Run (the Kafka part needs the local stack: `.venv/bin/pipeline-project stack up`):

    .venv/bin/python bench/mixture.py              # sampler + real brokers; prints a table
    .venv/bin/python bench/mixture.py --no-stack   # the sampler alone

Measures, for the issue's target {en_web 0.5, zh_web 0.3, code 0.15, books 0.05}:

1. sampler: realized shares over 10,000 draws, the largest deviation from `n * share` at any prefix
   (in blocks), resume from a JSON state after 3,333 draws (identical continuation?), 4 DDP ranks x batch 8
   (the union of the ranks' draws per position equals the single-rank sequence?), draws per second;
2. real brokers: 4 domains produced in EQUAL amounts (6,000 blocks each, 8 partitions, 5 blocks per
   message, by the transactional producer with domain headers), so the loader must reshape the mix; the
   mixture loader reads 10,000 blocks (batch 8): realized shares from the blocks' own contents (each block's
   first token names its domain), the worst share over any window of 100 blocks, resume after 4,000 blocks
   from the saved state (the next 6,000 blocks identical to the uninterrupted run?), and blocks/s next to
   the plain loader reading 10,000 blocks of the same topic (the mixture's price: one consumer set per domain).

Prints markdown with the load average and writes bench/results/mixture.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline_project.streaming.load.mixture import MixtureConfig, MixtureSampler, RankMixture  # noqa: E402
from pipeline_project.streaming.produce.request import ProduceRequest  # noqa: E402

RESULTS = REPO / "bench" / "results" / "mixture.json"
TARGET = {"en_web": 0.5, "zh_web": 0.3, "code": 0.15, "books": 0.05}
IDS = {d: i + 1 for i, d in enumerate(TARGET)}
NAMES = {i: d for d, i in IDS.items()}
N = 10_000
SEQ_LEN = 64


def sampler_part() -> dict:
    s = MixtureSampler(TARGET, seed=0)
    t0 = time.perf_counter()
    seq = [s.next() for _ in range(N)]
    rate = N / (time.perf_counter() - t0)
    counts: Counter = Counter()
    worst = 0.0
    for i, d in enumerate(seq, 1):
        counts[d] += 1
        worst = max(worst, max(abs(counts[x] - i * w) for x, w in TARGET.items()))
    head = MixtureSampler(TARGET, seed=0)
    first = [head.next() for _ in range(3333)]
    again = MixtureSampler(TARGET, seed=0)
    again.load_state_dict(json.loads(json.dumps(head.state_dict())))
    resumed = first + [again.next() for _ in range(N - 3333)] == seq
    world, batch = 4, 8
    ranks = [RankMixture(MixtureSampler(TARGET, seed=0), rank=r, world_size=world, batch_size=batch) for r in range(4)]
    by_pos = {}
    for m in ranks:
        for _ in range(N // world):
            d = m.peek()  # draws the step when a new one starts
            by_pos[(m.step, m.step_positions()[0])] = d
            m.served()
    covered = (N // (world * batch)) * world * batch  # whole steps
    union = [by_pos[(i // (world * batch), i % (world * batch))] for i in range(covered)] == seq[:covered]
    return {
        "realized": {d: counts[d] / N for d in TARGET},
        "max_prefix_deviation_blocks": round(worst, 3),
        "resume_identical": resumed,
        "ddp_4x8_union_is_single_rank_sequence": union,
        "draws_per_s": round(rate),
    }


@dataclass(frozen=True)
class _Tok:
    name: str = "bench-tok"
    hash: str = "bench-hash"


def _items(per_domain: int):
    made = dict.fromkeys(TARGET, 0)
    rng = np.random.default_rng(0)
    while any(made[d] < per_domain for d in TARGET):
        for d in TARGET:
            n = min(int(rng.integers(1, 12)), per_domain - made[d])
            if n:
                b = np.full((n, SEQ_LEN), 9, dtype=np.uint32)
                b[:, 0], b[:, 1] = IDS[d], np.arange(made[d], made[d] + n)
                made[d] += n
                yield d, b


def _read(cfg, n_blocks: int, state=None):
    from pipeline_project.streaming.load.domain_source import make_loader

    loader = make_loader(cfg)
    if state is not None:
        loader.load_state_dict(json.loads(json.dumps(state)))
    rows = []
    t0 = time.perf_counter()
    for batch in loader:
        rows.extend((int(r[0]), int(r[1])) for r in batch)
        if len(rows) >= n_blocks:
            break
    seconds = time.perf_counter() - t0
    out = rows, loader.state_dict(), seconds
    loader.close()
    return out


def stack_part() -> dict:
    from pipeline_project.settings import Settings
    from pipeline_project.stack.discovery import with_local_s3
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.kafka.topics import ensure_topic
    from pipeline_project.streaming.load.loader import LoaderConfig
    from pipeline_project.streaming.produce.producer import produce_blocks
    from pipeline_project.streaming.produce.request import ProducerConfig

    kafka = KafkaSettings.from_settings(with_local_s3(Settings()))
    topic = f"bench-mixture-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=8, replication_factor=3, min_insync_replicas=2)
    per_domain = 6000
    t0 = time.perf_counter()
    report = produce_blocks(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key="b",
            content_hash="bench",
            source="b",
            seq_len=SEQ_LEN,
            tokenizer=_Tok(),
            config=ProducerConfig(max_message_bytes=5 * SEQ_LEN * 4),
        ),
        _items(per_domain),
    )
    produce_s = time.perf_counter() - t0
    base = dict(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=8, rank=0, world_size=1, seed=0,
                expected_tokenizer_hash="bench-hash", idle_timeout_s=20.0)  # fmt: skip
    cfg = LoaderConfig(**base, mixture=MixtureConfig(proportions=TARGET))
    rows, _, mix_s = _read(cfg, N)
    head, state, _ = _read(cfg, 4000)
    tail, _, _ = _read(cfg, N - 4000, state=state)
    plain_rows, _, plain_s = _read(LoaderConfig(**base), N)
    rows = rows[:N]
    domains = [NAMES[d] for d, _ in rows]
    counts = Counter(domains)
    n = len(rows)
    window = 100
    worst_window = max(
        abs(Counter(domains[i : i + window])[d] / window - w)
        for i in range(0, n - window + 1, window)
        for d, w in TARGET.items()
    )
    return {
        "topic_blocks_per_domain": {d: c["blocks"] for d, c in report.domains.items()},
        "produce_s": round(produce_s, 2),
        "blocks_read": n,
        "realized": {d: counts[d] / n for d in TARGET},
        "max_abs_error": round(max(abs(counts[d] / n - w) for d, w in TARGET.items()), 5),
        "worst_window_100_error": round(worst_window, 3),
        "no_block_twice": len(set(rows)) == n,
        "resume_identical": head[:4000] + tail[: N - 4000] == rows,
        "mixture_blocks_per_s": round(N / mix_s),
        "plain_blocks_per_s": round(len(plain_rows[:N]) / plain_s),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-stack", action="store_true", help="the sampler alone, no Kafka")
    args = ap.parse_args()
    load_before = os.getloadavg()
    res: dict = {"target": TARGET, "blocks": N, "sampler": sampler_part()}
    if not args.no_stack:
        res["stack"] = stack_part()
    res["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    res["loadavg_before"] = [round(x, 2) for x in load_before]
    res["cpus"] = os.cpu_count()
    print(f"mixture over {N:,} blocks, load average {res['loadavg'][0]} on {res['cpus']} CPUs\n")
    print("| domain | target | sampler realized | Kafka loader realized |")
    print("|---|---:|---:|---:|")
    for d, w in TARGET.items():
        kafka = f"{res['stack']['realized'][d]:.4f}" if "stack" in res else "-"
        print(f"| {d} | {w:.2f} | {res['sampler']['realized'][d]:.4f} | {kafka} |")
    print()
    for part in ("sampler", "stack"):
        for k, v in res.get(part, {}).items():
            if k != "realized":
                print(f"- {part}.{k}: {v}")
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
