"""Multi-node training on the namespace cluster, as the tests and bench/cluster.py drive it.

The trainer command is the launchers' own (`resources.launchers.multinode_command`, as the Kubernetes JobSet
builds it, with the `trainer_env` the pods get); only the transport differs: `pipeline-project cluster exec HOST`
on each trainer host instead of one pod per node. Token blocks go to the cluster's Kafka from the operator's seat
(the machine's namespace on the bridge), at the brokers' addresses.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from pipeline_project.cluster import Cluster
from pipeline_project.defs.resources.launchers import RDZV_PORT, multinode_command, trainer_env
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import decode_message
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.config import ModelPreset, TrainConfig
from pipeline_project.training.entrypoint import RESULT_PREFIX
from pipeline_project.training.job import JobConfig
from pipeline_project_harness.cluster.spec import CLI_OPTS, SPEC

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus" / "en_tinyshakespeare" / "tinyshakespeare_input.txt"
CLI = str(REPO / ".venv" / "bin" / "pipeline-project")
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
SEQ_LEN, BATCH = 32, 2
SCRATCH = "trainer-scratch"  # relative: each host resolves it in its own work/ directory


def kafka(cluster: Cluster) -> KafkaSettings:
    return KafkaSettings.from_settings(cluster.settings(), client_id="multinode-test")


def produce(cluster: Cluster, topic: str, blocks: int, tokenizer, *, partitions: int = 4, key: str = "b1") -> int:
    """About `blocks` distinct token blocks (2 per message, so they spread over every partition); blocks written."""
    ensure_topic(kafka(cluster).make_admin(), topic, partitions=partitions, replication_factor=3)
    text = CORPUS.read_text(encoding="utf-8")[: blocks * SEQ_LEN * 4]
    docs = [text[i : i + 400] for i in range(0, len(text), 400)]
    report = tokenize_and_produce(
        kafka(cluster),
        ProduceRequest(
            topic=topic,
            ledger_key=f"{topic}-{key}",
            content_hash=hashlib.sha256(text.encode()).hexdigest(),
            source=key,
            seq_len=SEQ_LEN,
            tokenizer=tokenizer,
            config=ProducerConfig(max_message_bytes=2 * SEQ_LEN * 4),
        ),
        docs,
    )
    return report.blocks


def topic_blocks(cluster: Cluster, topic: str, partitions: int = 4) -> dict[str, list[tuple[int, int, str]]]:
    """Every committed block of the topic: partition -> [(offset, block index in the message, sha256)], in order."""
    consumer = Consumer(kafka(cluster).consumer_config())
    out: dict[str, list[tuple[int, int, str]]] = {str(p): [] for p in range(partitions)}
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=500, timeout=1.0)
            for msg in msgs:
                if msg.error() is None:
                    p, o = msg.partition(), msg.offset()
                    rows = decode_message(msg.value(), msg.headers(), topic=topic, partition=p, offset=o)
                    out[str(p)] += [(o, i, hashlib.sha256(row.tobytes()).hexdigest()) for i, row in enumerate(rows)]
            at = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if not msgs and all(end == 0 or tp.offset >= end for tp, end in zip(at, ends, strict=True)):
                break
    finally:
        consumer.close()
    return out


def trained_slice(blocks: list[tuple[int, int, str]], start: dict | None, end: dict) -> list[str]:
    """The hashes of the blocks between two positions ({"offset": next message, "block": blocks used of it})."""

    def index(pos: dict | None) -> int:
        if pos is None:
            return 0
        return sum(1 for o, i, _ in blocks if (o, i) < (pos["offset"], pos.get("block", 0)))

    return [h for _, _, h in blocks[index(start) : index(end)]]


def job(cluster: Cluster, topic: str, prefix: str, *, max_steps: int | None, **train) -> JobConfig:
    settings = cluster.settings()
    knobs = {"lr": 3e-3, "warmup_steps": 2, "decay_steps": 50, "checkpoint_every": None, **train}
    cfg = TrainConfig(preset=ModelPreset(name="tiny"), batch_size=BATCH, max_steps=max_steps,
                      device="cpu", **knobs)  # fmt: skip
    return JobConfig(
        train=cfg, kafka=kafka(cluster), topic=TopicSpec(name=topic, seq_len=SEQ_LEN), s3_endpoint=settings.s3_endpoint,
        bucket=settings.bucket, checkpoint_prefix=prefix, work_dir=SCRATCH, loader_idle_timeout_s=5,
        log_model_to_mlflow=False,
    )  # fmt: skip


@dataclass
class NodeRun:
    host: str
    proc: subprocess.Popen
    log: Path


def launch(job_config: JobConfig, hosts: list[str], run_id: str, log_dir: Path, *, nproc: int = 2,
           max_restarts: int = 0, cli_opts: list[str] = CLI_OPTS) -> list[NodeRun]:  # fmt: skip
    """torchrun on each host through `cluster exec`; the first host serves the c10d rendezvous."""
    cmd = multinode_command(run_id, len(hosts), nproc, endpoint=f"{hosts[0]}:{RDZV_PORT}",
                            max_restarts=max_restarts, torchrun=TORCHRUN, require_cuda=False)  # fmt: skip
    env = {**os.environ, **trainer_env(job_config), "OMP_NUM_THREADS": "1"}
    runs = []
    for host in hosts:
        log = log_dir / f"{run_id}-{host}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([CLI, *cli_opts, "exec", host, "--", *cmd], env=env, stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip
        runs.append(NodeRun(host, proc, log))
    return runs


def wait(runs: list[NodeRun], timeout: float = 600) -> dict:
    """Every node's exit 0, then rank 0's TrainJobResult (rank 0 is on whichever node c10d made node 0)."""
    deadline = time.monotonic() + timeout
    codes = [r.proc.wait(timeout=max(1.0, deadline - time.monotonic())) for r in runs]
    logs = {r.host: r.log.read_text() for r in runs}
    assert codes == [0] * len(runs), "\n".join(f"--- {h}\n{text[-3000:]}" for h, text in logs.items())
    results = [line for text in logs.values() for line in text.splitlines() if line.startswith(RESULT_PREFIX)]
    assert len(results) == 1, results
    return json.loads(results[0][len(RESULT_PREFIX) :])


def downloads(host: str) -> dict[str, list[str]]:
    """The checkpoints a host's node downloaded: resume dir name -> its files, from the host's own directory."""
    scratch = SPEC.root / "hosts" / host / "work" / SCRATCH
    found = sorted(scratch.glob("resume-step-*")) if scratch.is_dir() else []
    return {d.name: sorted(str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()) for d in found}


def clear_downloads(*hosts: str) -> None:
    """Remove the resume dirs earlier tests of the session left on `hosts` (a dir is named for its step and rank
    only, so another lineage's `resume-step-6-rank0` would read as this test's)."""
    import shutil

    for host in hosts:
        for d in (SPEC.root / "hosts" / host / "work" / SCRATCH).glob("resume-step-*"):
            shutil.rmtree(d, ignore_errors=True)


def cli_kill(host: str, cli_opts: list[str] = CLI_OPTS) -> int:
    """`pipeline-project cluster kill HOST`, as an operator types it; its exit code."""
    return subprocess.run([CLI, *cli_opts, "kill", host], capture_output=True, timeout=120).returncode


def cluster_opts(cluster: Cluster) -> list[str]:
    """The CLI options that name `cluster`."""
    spec = cluster.spec
    return ["cluster", "--dir", str(spec.root), "--prefix", spec.prefix, "--subnet", spec.subnet]
