"""The Kafka kill trials (a broker under the producer, a broker under the loader, the producing process), as the
fault tests and `bench/reliability.py` run them; the trainer's is in `training_trials`, the outages in `outages`,
the Dagster deployment's in `dagster_faults`.

A trial injects one fault into real processes of a throw-away stack (`faults.throwaway_config`), lets the system
recover without help (the only hand is `Stack.up`, which restarts what was killed, as a supervisor would), and
returns a `TrialResult` whose counts come from sequence numbers read back from Kafka, never from the component's
own report. The tests assert on it; the bench tabulates many of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline_project.stack import Stack
from pipeline_project.streaming.kafka.client import transactional_id_for
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.ledger.records import ProduceReport, ensure_ledger_topic, read_ledger
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.verify import verify_produced
from pipeline_project_harness.reliability import produce_worker
from pipeline_project_harness.reliability.faults import (
    SlowLinkKafkaSettings,
    broker_name,
    busiest_leader,
    kafka_of,
    restart,
    sigkill,
    transaction_coordinator,
)
from pipeline_project_harness.reliability.invariants import (
    SEQ_TOKENIZER,
    audit,
    read_committed,
    seq_blocks,
    uncommitted_records,
    write_seq_topic,
)

REPO = Path(__file__).resolve().parents[2]
SEQ_LEN = 64
BLOCKS_PER_MESSAGE = 64  # 16 KiB messages: many per partition, so order within a partition means something
BOUNDED_TRANSACTION_BYTES = 16 * BLOCKS_PER_MESSAGE * SEQ_LEN * 4  # 16 messages per transaction
SLOW_LINK_S = 0.075  # per data message: a 64-message batch keeps its transaction(s) open for ~5 s


@dataclass
class TrialResult:
    kind: str
    timing_s: float  # when the fault was injected, after the trial's reference moment (see each trial)
    victim: str
    blocks_claimed: int | None  # what the component reported (None: no report)
    blocks_found: int  # distinct expected blocks read back
    lost: int
    duplicated: int
    recovery_s: float | None  # restart of the killed process -> healthy again (Kafka: every partition in ISR)
    ok: bool
    attempts: int = 1  # calls it took to complete (1: the faulted call itself succeeded)
    error: str = ""  # what the faulted call raised, if anything
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _where(exc: BaseException) -> str:
    """The innermost project frames of a traceback, `file:line in function` (what a report names)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "pipeline_project" in f.filename]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames[-4:]))


def unique_topic(kind: str) -> str:
    return f"rel-{kind}-{uuid.uuid4().hex[:8]}"


# How long a committed batch may take to become visible to read_committed readers (ProducerConfig's default is
# 60 s): generous next to a broker failover (the controller fences a dead broker after 9 s and the coordinator
# then writes the commit markers to the new leaders), short enough that a trial that hangs on a dead broker does
# not cost a minute.
VISIBILITY_TIMEOUT_S = 30.0


def _producer_config(bounded: bool) -> ProducerConfig:
    extra = {"transaction_max_bytes": BOUNDED_TRANSACTION_BYTES} if bounded else {}
    return ProducerConfig(
        max_message_bytes=BLOCKS_PER_MESSAGE * SEQ_LEN * 4, visibility_timeout_s=VISIBILITY_TIMEOUT_S, **extra
    )


def _new_data_topic(stack: Stack, kind: str, partitions: int = 4) -> str:
    kafka = kafka_of(stack)
    topic = unique_topic(kind)
    admin = kafka.make_admin()
    # a broker restarted by the previous trial can take a while to lead new partitions on a loaded machine
    ensure_topic(admin, topic, partitions=partitions, replication_factor=3, min_insync_replicas=2, timeout_s=90)
    ensure_ledger_topic(admin, topic, timeout_s=90)
    return topic


# -- 1. a broker dies while the producer produces -----------------------------------------------------------


def broker_kill_while_producing(
    stack: Stack, *, delay_s: float, victim: str = "coordinator", bounded: bool = False, n_blocks: int = 4096
) -> TrialResult:
    """SIGKILL one of the 3 brokers `delay_s` after the first data message of the batch's (first) transaction,
    restart it once the producer returned, then read the topic back (read_committed).

    `victim`: "coordinator" (the transaction coordinator of this batch's transactional.id) or "leader" (the broker
    leading the most partitions of the topic). `bounded`: the batch spans several transactions."""
    t_start = time.monotonic()
    kafka = kafka_of(stack)
    topic = _new_data_topic(stack, "produce")
    key = "batch-0"
    victim_id = (
        transaction_coordinator(kafka, transactional_id_for(kafka, topic, key))
        if victim == "coordinator"
        else busiest_leader(kafka, topic)
    )
    first = threading.Event()
    slow = SlowLinkKafkaSettings(bootstrap_servers=kafka.bootstrap_servers, client_id=kafka.client_id,
                                 produce_delay_s=SLOW_LINK_S)  # fmt: skip
    slow._on_first_data = first.set
    outcome: dict[str, Any] = {}

    def produce(settings) -> ProduceReport:
        return produce_blocks(
            settings,
            ProduceRequest(
                topic=topic,
                ledger_key=key,
                content_hash=f"seq-0-{n_blocks}",
                source=key,
                seq_len=SEQ_LEN,
                tokenizer=SEQ_TOKENIZER,
                config=_producer_config(bounded),
            ),
            [seq_blocks(0, n_blocks, SEQ_LEN)],
        )

    def run() -> None:
        t0 = time.monotonic()
        try:
            outcome["report"] = produce(slow)
            outcome["produce_s"] = time.monotonic() - t0
        except BaseException as exc:  # noqa: BLE001 - recorded, and the trial retries like a step retry would
            outcome["error"] = f"{type(exc).__name__}: {exc}"[:500]
            outcome["where"] = _where(exc)
            outcome["produce_s"] = time.monotonic() - t0

    thread = threading.Thread(target=run, name="produce-under-broker-kill")
    thread.start()
    assert first.wait(120), "the producer never started its transaction"
    time.sleep(delay_s)
    killed_during_produce = thread.is_alive()
    sigkill(stack, broker_name(victim_id))
    thread.join(600)
    assert not thread.is_alive(), "produce_blocks did not return within 10 minutes of a broker kill"
    recovery_s = restart(stack, "kafka")
    attempts, report = 1, outcome.get("report")
    if report is None:  # what a Dagster step retry does: the same ledger key again, now on a healthy cluster
        attempts, report = 2, produce(kafka)
    verify_produced(kafka, report)
    a = audit(read_committed(kafka, topic), range(n_blocks), source=key, report=report)
    return TrialResult(
        kind="broker_kill_producer", timing_s=delay_s, victim=f"{victim} kafka-{victim_id}",
        blocks_claimed=report.blocks, blocks_found=a.found, lost=len(a.lost), duplicated=len(a.duplicated),
        recovery_s=recovery_s, ok=a.ok and attempts == 1, attempts=attempts, error=outcome.get("error", ""),
        seconds=time.monotonic() - t_start,
        detail={"audit": a.summary(), "bounded": bounded, "transactions": getattr(report, "transactions", None),
                "killed_during_produce": killed_during_produce, "topic": topic, "raised_at": outcome.get("where", ""),
                "produce_s": outcome.get("produce_s")},
    )  # fmt: skip


# -- 2. a broker dies while the loader consumes ---------------------------------------------------------------


@dataclass(frozen=True)
class SeededTopic:
    topic: str
    n_blocks: int
    trace: tuple[tuple[int, int, int], ...]  # (partition, offset, block) of every delivered block, undisturbed
    seqs: tuple[int, ...]  # sequence number of every delivered block, in order
    digest: str  # sha256 of every delivered batch's bytes, in order


LOADER_BATCH = 8
LOADER_SEED = 7


def _consume(
    stack: Stack, topic: str, *, step_s: float = 0.0, on_batch=None, **overrides: Any
) -> tuple[list, list[int], str]:
    """The bounded loader over `topic`: its trace, sequence numbers and batch digest; `overrides`: LoaderConfig
    fields that leave the delivered order alone (buffering, timeouts)."""
    loader = KafkaBlockLoader(
        LoaderConfig(kafka=kafka_of(stack), topic=topic, seq_len=SEQ_LEN, batch_size=LOADER_BATCH, rank=0,
                     world_size=1, num_workers=2, mode="bounded", seed=LOADER_SEED, trace=True, **overrides)
    )  # fmt: skip
    digest, seqs, n = hashlib.sha256(), [], 0
    try:
        for batch in loader:
            arr = batch.numpy()
            digest.update(arr.tobytes())
            seqs.extend(int(s) for s in arr[:, 0])
            n += 1
            if on_batch is not None:
                on_batch(n)
            if step_s:
                time.sleep(step_s)  # a training step
    finally:
        loader.close()
    return list(loader.trace), seqs, digest.hexdigest()


def seed_loader_topic(stack: Stack, n_blocks: int = 3000) -> SeededTopic:
    """A topic of sequence blocks, and what an undisturbed bounded loader delivers from it."""
    kafka = kafka_of(stack)
    topic = unique_topic("consume")
    ensure_topic(kafka.make_admin(), topic, partitions=4, replication_factor=3, min_insync_replicas=2)
    write_seq_topic(kafka, topic, n_blocks, SEQ_LEN, blocks_per_message=8)
    trace, seqs, digest = _consume(stack, topic)
    return SeededTopic(topic, n_blocks, tuple(trace), tuple(seqs), digest)


def delivered_counts(seqs: list[int], seeded: SeededTopic) -> tuple[int, int, int]:
    """Blocks lost and duplicated by a loader run (by sequence number) against the undisturbed run, and found."""
    counts, want = Counter(seqs), Counter(seeded.seqs)
    lost = sum((want - counts).values())
    duplicated = sum(c - 1 for c in counts.values() if c > 1)
    return lost, duplicated, len(set(seqs) & set(seeded.seqs))


def broker_kill_while_consuming(
    stack: Stack, seeded: SeededTopic, *, delay_s: float, down_s: float = 2.0, step_s: float = 0.01
) -> TrialResult:
    """SIGKILL the broker leading most of the topic `delay_s` after the first batch, restart it `down_s` later
    while the loader goes on, and compare what it delivered with the undisturbed run."""
    t_start = time.monotonic()
    kafka = kafka_of(stack)
    victim_id = busiest_leader(kafka, seeded.topic)
    state: dict[str, Any] = {}

    def back_up() -> None:
        time.sleep(down_s)
        state["recovery_s"] = restart(stack, "kafka")

    restarter = threading.Thread(target=back_up, name="broker-restart")

    def on_batch(n: int) -> None:
        if n == 1:
            state["t0"] = time.monotonic()
        elif "killed" not in state and time.monotonic() - state["t0"] >= delay_s:
            sigkill(stack, broker_name(victim_id))
            state["killed"] = n
            restarter.start()

    error = ""
    try:
        trace, seqs, digest = _consume(stack, seeded.topic, step_s=step_s, on_batch=on_batch)
    except Exception as exc:  # noqa: BLE001 - a loader that gives up under a broker kill is the finding
        trace, seqs, digest = [], [], ""
        error = f"{type(exc).__name__}: {exc}"[:500]
    if "killed" in state:
        restarter.join(600)
    lost, duplicated, found = delivered_counts(seqs, seeded)
    same = trace == list(seeded.trace) and digest == seeded.digest
    return TrialResult(
        kind="broker_kill_loader", timing_s=delay_s, victim=f"leader kafka-{victim_id}",
        blocks_claimed=len(seeded.seqs), blocks_found=found, lost=lost,
        duplicated=duplicated, recovery_s=state.get("recovery_s"), ok=same and not error and "killed" in state,
        error=error, seconds=time.monotonic() - t_start,
        detail={"same_trace": trace == list(seeded.trace), "same_digest": digest == seeded.digest,
                "killed_after_batch": state.get("killed"), "batches": len(seqs) // LOADER_BATCH, "down_s": down_s,
                "topic": seeded.topic},
    )  # fmt: skip


# -- 3. the producing process dies mid-transaction ------------------------------------------------------------


def _worker_cmd(stack: Stack, topic: str, key: str, n_blocks: int, *, slow: bool, bounded: bool) -> list[str]:
    return [
        sys.executable, "-m", produce_worker.__name__, "--bootstrap", stack.config.kafka_bootstrap, "--topic", topic,
        "--ledger-key", key, "--blocks", str(n_blocks), "--seq-len", str(SEQ_LEN),
        "--message-blocks", str(BLOCKS_PER_MESSAGE), "--slow-link", str(SLOW_LINK_S if slow else 0.0),
        *(["--transaction-bytes", str(BOUNDED_TRANSACTION_BYTES)] if bounded else []),
    ]  # fmt: skip


def _worker_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _worker_report(stdout: str) -> tuple[ProduceReport, bool]:
    lines = [line for line in stdout.splitlines() if line.startswith(produce_worker.REPORT)]
    assert len(lines) == 1, f"the producer printed no report: {stdout[-2000:]}"
    d = json.loads(lines[0][len(produce_worker.REPORT) :])
    return ProduceReport.from_ledger_json(json.dumps(d["ledger"]).encode()), bool(d["reused"])


def producer_process_kill(stack: Stack, *, delay_s: float, bounded: bool = False, n_blocks: int = 4096) -> TrialResult:
    """SIGKILL a producing process `delay_s` after its first data message went out inside a transaction, then run
    the same ledger key in a new process (the retry) and once more (a re-run must produce nothing)."""
    t_start = time.monotonic()
    kafka = kafka_of(stack)
    topic = _new_data_topic(stack, "proc")
    key = "batch-0"
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            _worker_cmd(stack, topic, key, n_blocks, slow=True, bounded=bounded), cwd=REPO, env=_worker_env(),
            stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
        try:
            line = proc.stdout.readline()
            if line.strip() != produce_worker.IN_TRANSACTION:
                stderr.seek(0)
                raise AssertionError(f"the producer said {line!r}, not {produce_worker.IN_TRANSACTION}: "
                                     f"{stderr.read()[-3000:]}")  # fmt: skip
            time.sleep(delay_s)
            alive_at_kill = proc.poll() is None
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(30)
            proc.stdout.close()
    pending = uncommitted_records(kafka, topic)  # > 0: the kill left a transaction open
    visible = read_committed(kafka, topic, timeout_s=30)
    after_kill = audit(visible, range(n_blocks), source=key)
    prefix = sorted(s for m in visible for s in m.seqs)
    committed_prefix = prefix == list(range(len(prefix)))  # what earlier (bounded) transactions committed
    completed_early = key in read_ledger(kafka, topic)

    t_retry = time.monotonic()
    retry = subprocess.run(
        _worker_cmd(stack, topic, key, n_blocks, slow=False, bounded=bounded), cwd=REPO, env=_worker_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert retry.returncode == 0, f"the retry failed: {retry.stderr[-3000:]}"
    report, reused = _worker_report(retry.stdout)
    retry_s = time.monotonic() - t_retry
    verify_produced(kafka, report)
    final = audit(read_committed(kafka, topic), range(n_blocks), source=key, report=report)
    again = subprocess.run(
        _worker_cmd(stack, topic, key, n_blocks, slow=False, bounded=bounded), cwd=REPO, env=_worker_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, f"the re-run failed: {again.stderr[-3000:]}"
    report_again, reused_again = _worker_report(again.stdout)
    idempotent = reused_again and report_again.offsets == report.offsets
    ok = (
        final.ok and idempotent and committed_prefix and not after_kill.duplicated and not after_kill.corrupt
        and not completed_early
    )  # fmt: skip
    return TrialResult(
        kind="producer_process_kill", timing_s=delay_s, victim="producer process",
        blocks_claimed=report.blocks, blocks_found=final.found, lost=len(final.lost),
        duplicated=len(final.duplicated), recovery_s=retry_s, ok=ok, attempts=2, seconds=time.monotonic() - t_start,
        detail={"alive_at_kill": alive_at_kill, "uncommitted_after_kill": pending,
                "visible_after_kill": sum(len(m.seqs) for m in visible), "visible_is_prefix": committed_prefix,
                "retry_reused": reused, "rerun_reused": reused_again, "rerun_same_offsets": idempotent,
                "bounded": bounded, "audit": final.summary(), "topic": topic},
    )  # fmt: skip
