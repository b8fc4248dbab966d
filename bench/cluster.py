"""Loader throughput across the namespace cluster: ranks on both trainer hosts read token blocks from the three
broker hosts over the virtual network (docs/cluster.md).

Run as root (it starts its own cluster, prefix `ppb`, subnet 10.79.0.0/24, state under .cluster/bench, and takes it
down at the end unless --keep):

    .venv/bin/python bench/cluster.py                    # prints a markdown table, writes bench/results/cluster.json
    .venv/bin/python bench/cluster.py --ranks 1 2 4 --topic-mib 64 --no-faults     # quicker

One topic of `--topic-mib` of blocks (8 partitions, replication 3) is written once from the operator's seat; then
each world size reads all of it in bounded mode (median of --repeats), every rank a `KafkaBlockLoader` (`rank`,
`world_size`) started by `cluster exec` on its host (ranks alternate trainer-1, trainer-2), all ranks of a trial at once. Tokens/s per rank
is its tokens over its own wall time (loader start to end of data); total is all tokens over the slowest rank's.
The ratios to 1 rank are side by side in this one run. On a 2-core machine the ranks share the CPUs with the
brokers, so more ranks mostly measure contention, not the network: read them with the load average printed.
Then the host-fault trials, timed (--no-faults skips them): the trainer kill of
pipeline_project_tests/cluster/test_host_faults.py, and a broker host cut 30 s while a batch is produced and the
loader reads (`broker_faults.cluster_bench_faults`, as test_broker_faults.py); the PostgreSQL host cut 30 s during
cleaned_shards and the daemon killed on the dagster host (`pg_faults.cluster_bench_faults`, as test_pg_faults.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline_project.streaming.produce.request import ProduceRequest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_results  # noqa: E402

HOSTS = ("trainer-1", "trainer-2")
MIB = 1024 * 1024


@dataclass(frozen=True)
class _Identity:
    name: str = "bench-random"
    hash: str = "0" * 64


def worker(topic: str, rank: int, world: int, seq_len: int, batch: int) -> dict:
    """One rank's loader, every batch of its share of the topic; runs on a trainer host (`cluster exec`)."""
    from pipeline_project.settings import Settings
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig

    kafka = KafkaSettings.from_settings(Settings(), client_id=f"bench-r{rank}")
    started = time.perf_counter()
    cfg = LoaderConfig(kafka=kafka, topic=topic, seq_len=seq_len, batch_size=batch, rank=rank, world_size=world,
                       mode="bounded", idle_timeout_s=5, device="cpu", num_workers=1)  # fmt: skip
    loader = KafkaBlockLoader(cfg)
    tokens = 0
    try:
        for tensor in loader:
            tokens += tensor.numel()
    finally:
        loader.close()
    return {"rank": rank, "tokens": tokens, "seconds": time.perf_counter() - started}


def produce_topic(cluster, mib: float, seq_len: int) -> tuple[str, int]:
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.kafka.format import max_blocks_per_message
    from pipeline_project.streaming.kafka.topics import ensure_topic
    from pipeline_project.streaming.produce.producer import produce_blocks

    kafka = KafkaSettings.from_settings(cluster.settings(), client_id="bench-producer")
    topic = f"bench-cluster-{uuid.uuid4().hex[:6]}"
    ensure_topic(kafka.make_admin(), topic, partitions=8, replication_factor=3)
    n_blocks = int(mib * MIB // (seq_len * 4))
    data = np.random.default_rng(0).integers(0, 100_000, size=(n_blocks, seq_len), dtype=np.uint32)
    per_msg = max_blocks_per_message(seq_len)
    produce_blocks(
        kafka,
        ProduceRequest(
            topic=topic, ledger_key=topic, content_hash=topic, source="bench", seq_len=seq_len, tokenizer=_Identity()
        ),
        (data[i : i + per_msg] for i in range(0, n_blocks, per_msg)),
    )
    return topic, n_blocks


def trial(cluster, topic: str, world: int, seq_len: int, batch: int) -> dict:
    """`world` ranks at once, alternating over the trainer hosts."""
    procs = []
    for rank in range(world):
        host = HOSTS[rank % len(HOSTS)]
        cmd = [sys.executable, str(Path(__file__).resolve()), "worker", topic, str(rank), str(world),
               str(seq_len), str(batch)]  # fmt: skip
        argv = [*cluster_cli(cluster), "exec", host, "--", *cmd]
        procs.append((host, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    ranks = []
    for host, proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"worker on {host} failed: {err.strip().splitlines()[-1:]}")
        ranks.append({"host": host, **json.loads(out.strip().splitlines()[-1])})
    slowest = max(r["seconds"] for r in ranks)
    for r in ranks:
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
    return {"world": world, "ranks": ranks, "tokens": sum(r["tokens"] for r in ranks), "wall_s": slowest,
            "total_tokens_per_s": sum(r["tokens"] for r in ranks) / slowest}  # fmt: skip


def best_of(cluster, topic: str, world: int, args) -> dict:
    """The median (by total tokens/s) of `args.repeats` trials of `world` ranks, with every run's total."""
    runs = sorted((trial(cluster, topic, world, args.seq_len, args.batch_size) for _ in range(args.repeats)),
                  key=lambda t: t["total_tokens_per_s"])  # fmt: skip
    return {**runs[len(runs) // 2], "runs_total_tokens_per_s": [t["total_tokens_per_s"] for t in runs]}


def trainer_kill_trial(cluster, work: Path) -> dict:
    """2 nodes x 2 ranks train (checkpoint every 2 steps); `cluster kill trainer-2` once the first checkpoint is in
    S3; a retry of the same job on both nodes continues from it. Seconds from the kill to the survivor's exit and to
    the retry's end, and the blocks counted by position and content hash (as test_host_faults.py does)."""
    from pipeline_project.streaming.tokenizer import load_tokenizer
    from pipeline_project.training.checkpoint.store import read_latest, s3_client
    from pipeline_project_harness.cluster import multinode as mn

    opts, hosts = mn.cluster_opts(cluster), list(HOSTS)
    topic, prefix = f"bench-fault-{uuid.uuid4().hex[:6]}", f"checkpoints/bench-fault-{uuid.uuid4().hex[:6]}"
    mn.produce(cluster, topic, 120, load_tokenizer())
    blocks = mn.topic_blocks(cluster, topic)
    job = mn.job(cluster, topic, prefix, max_steps=None, checkpoint_every=2)
    s3, bucket = s3_client(cluster.settings()), cluster.settings().bucket
    first = mn.launch(job, hosts, f"bench-a-{uuid.uuid4().hex[:6]}", work, cli_opts=opts)
    while (ref := read_latest(s3, bucket, prefix).ref) is None:
        if any(r.proc.poll() is not None for r in first):
            raise SystemExit("the run ended before its first checkpoint")
        time.sleep(0.5)
    killed = time.monotonic()
    mn.cli_kill("trainer-2", cli_opts=opts)
    codes = [r.proc.wait(timeout=300) for r in first]
    detected = time.monotonic() - killed
    retry = mn.wait(mn.launch(job, hosts, f"bench-b-{uuid.uuid4().hex[:6]}", work, cli_opts=opts))
    recovered = time.monotonic() - killed
    trained = [
        h
        for start, end in ((None, retry["start_position"]), (retry["start_position"], retry["end_position"]))
        for p, part in blocks.items()
        for h in mn.trained_slice(part, start.get(p) if start else None, end.get(p))
    ]
    return {"fault": "kill trainer-2 mid-run", "checkpoint_step_at_kill": ref.step, "exit_codes": codes,
            "survivor_failed_s": detected, "retry_done_s": recovered, "resumed_step": retry["start_step"],
            "end_step": retry["end_step"], "blocks_in_lineage": len(trained),
            "blocks_twice": len(trained) - len(set(trained)),
            "blocks_expected": retry["end_step"] * mn.BATCH * 4}  # fmt: skip


def cluster_cli(cluster) -> list[str]:
    spec = cluster.spec
    return [str(REPO / ".venv" / "bin" / "pipeline-project"), "cluster", "--dir", str(spec.root), "--prefix",
            spec.prefix, "--subnet", spec.subnet]  # fmt: skip


def main(argv: list[str]) -> None:
    if argv[:1] == ["worker"]:
        topic, rank, world, seq_len, batch = argv[1], *map(int, argv[2:6])
        print(json.dumps(worker(topic, rank, world, seq_len, batch)))
        return
    from pipeline_project.cluster import Cluster, ClusterSpec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--topic-mib", type=float, default=256.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--no-faults", action="store_true", help="only the throughput trials")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "cluster.json"))
    args = ap.parse_args(argv)
    load_start = os.getloadavg()[0]
    cluster = Cluster(ClusterSpec(root=REPO / ".cluster" / "bench", prefix="ppb", subnet="10.79.0.0/24"))
    started = time.monotonic()
    cluster.up(timeout=300)
    up_s = time.monotonic() - started
    try:
        topic, n_blocks = produce_topic(cluster, args.topic_mib, args.seq_len)
        trials = [best_of(cluster, topic, w, args) for w in args.ranks]
        with tempfile.TemporaryDirectory() as work:
            faults = [trainer_kill_trial(cluster, Path(work))] if not args.no_faults else []
        if not args.no_faults:
            from pipeline_project_harness.cluster.broker_faults import cluster_bench_faults

            faults += cluster_bench_faults(cluster)
            from pipeline_project_harness.cluster import pg_faults  # PostgreSQL host cut mid-cleaning; daemon kill

            faults += pg_faults.cluster_bench_faults(cluster)
    finally:
        if not args.keep:
            cluster.down(wipe=True)
    base = trials[0]["total_tokens_per_s"]
    result = {"args": vars(args), "cluster_up_s": up_s, "topic": {"name": topic, "blocks": n_blocks},
              "throughput": trials, "faults": faults, "host": bench_results.host(load_start)}  # fmt: skip
    bench_results.write(Path(args.out), result)
    rows = []
    for t in trials:
        per_rank = [r["tokens_per_s"] for r in t["ranks"]]
        rows.append([str(t["world"]), f"{t['total_tokens_per_s']:,.0f}", f"{t['total_tokens_per_s'] / base:.2f}x",
                     f"{min(per_rank):,.0f} – {max(per_rank):,.0f}", f"{t['wall_s']:.1f}"])  # fmt: skip
    bench_results.print_table(["ranks", "total tokens/s", "vs 1 rank", "per rank tokens/s", "wall s"],
                              ["r", "r", "r", "r", "r"], rows)  # fmt: skip
    for f in faults:
        if "line" in f:  # pg_faults: a PostgreSQL-host cut, a daemon kill
            print(f["line"])
            continue
        if "recovered_s" in f:  # a broker cut
            print(f"{f['fault']}: healed at {f['heal_s']} s, recovered {f['recovered_s']} s after the cut; "
                  f"{f['found']}/{f['blocks']} blocks, {f['lost']} lost, {f['duplicated']} duplicated")  # fmt: skip
            continue
        print(
            f"{f['fault']} (checkpoint step {f['checkpoint_step_at_kill']}): survivor failed in "
            f"{f['survivor_failed_s']:.0f} s, retry from step {f['resumed_step']} done {f['retry_done_s']:.0f} s "
            f"after the kill; {f['blocks_in_lineage']}/{f['blocks_expected']} blocks, {f['blocks_twice']} twice"
        )
    print(bench_results.load_line(result))


if __name__ == "__main__":
    main(sys.argv[1:])
