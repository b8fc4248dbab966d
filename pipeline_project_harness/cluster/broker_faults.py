"""Broker host faults on the namespace cluster (issue 28 item 6): one broker host's link cut for `cut_s` seconds
(`Cluster.cut`: a partition, the broker keeps running) while a batch is produced to a token topic and while the
bounded loader feeds a training loop; then `heal`.

Counted with the reliability trials' own tools (`reliability.invariants`, `reliability.trials`): produced blocks
carry their sequence number and a content function of it, read back read_committed and audited against the
producer's report; the loader's delivered blocks are compared, by (partition, offset, block) trace, sequence
numbers and a SHA-256 over every batch, with an undisturbed run of the same loader over the same topic.
Clients run in the operator's seat (the machine's namespace on the cluster's bridge) and reach the brokers only
at their cluster addresses. The suite (`test_broker_faults.py`) and `bench/reliability.py` (kinds
`cluster_broker_produce`, `cluster_broker_loader`) run these functions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pipeline_project.cluster import Cluster
from pipeline_project.streaming.kafka.client import KafkaSettings, transactional_id_for
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.verify import verify_produced
from pipeline_project_harness.reliability import trials
from pipeline_project_harness.reliability.faults import (
    SlowLinkKafkaSettings,
    busiest_leader,
    ensure_transaction_state,
    transaction_coordinator,
)
from pipeline_project_harness.reliability.invariants import SEQ_TOKENIZER, audit, read_committed, seq_blocks

CUT_S = 30.0
PRODUCE_BLOCKS = 4096  # 64 messages of 64 blocks; with the slow link the first batch takes ~5 s
LOADER_BLOCKS = 3000
LOADER_STEP_S = 0.02  # a training step between batches
# small buffers, so the loader keeps fetching from every partition's leader instead of holding the whole topic
LOADER_BUFFERS = {"max_buffered_messages": 4, "consume_messages": 8}
# the product's defaults (timeouts above all), in bounded transactions of 16 messages, as the kill trials' batches
PRODUCER_CONFIG = ProducerConfig(max_message_bytes=trials.BLOCKS_PER_MESSAGE * trials.SEQ_LEN * 4,
                                 transaction_max_bytes=trials.BOUNDED_TRANSACTION_BYTES)  # fmt: skip
ENSURE_TIMEOUT_S = 20.0  # ensure_topic on the existing topic during the cut


def cluster_stack(cluster: Cluster) -> Any:
    """What the reliability trials' stack-taking helpers (`kafka_of`, `seed_loader_topic`) read of a stack."""
    return SimpleNamespace(config=cluster.spec.stack_config())


def kafka(cluster: Cluster) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=cluster.spec.stack_config().kafka_bootstrap, client_id="broker-faults")


@dataclass
class Timeline:
    """When the cut and the heal happened (monotonic), and the moments each client made progress."""

    cut_s: float
    t_cut: float = 0.0
    t_heal: float = 0.0
    batches: list[float] = field(default_factory=list)  # loader: every delivered batch
    produced: dict[str, float] = field(default_factory=dict)  # producer: batch key -> returned

    def since_cut(self, t: float | None) -> float | None:
        return None if t is None else round(t - self.t_cut, 1)

    def loader_figures(self) -> dict[str, Any]:
        t = self.batches
        during = [x for x in t if self.t_cut <= x < self.t_heal]
        after = next((x for x in t if x >= self.t_heal), None)
        gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
        return {"batches_during_cut": len(during), "first_batch_after_heal_s": self.since_cut(after),
                "longest_stall_s": round(max(gaps, default=0.0), 1),
                "done_s": self.since_cut(t[-1]) if t else None}  # fmt: skip


class Cutter:
    """Cut `host` now and heal it `cut_s` later on a thread (the heal happens even if the caller raises)."""

    def __init__(self, cluster: Cluster, host: str, timeline: Timeline):
        self.cluster, self.host, self.timeline = cluster, host, timeline
        self._thread = threading.Thread(target=self._heal_later, name=f"heal-{host}", daemon=True)

    def start(self) -> None:
        self.cluster.cut(self.host)
        self.timeline.t_cut = time.monotonic()
        self._thread.start()

    def _heal_later(self) -> None:
        time.sleep(self.timeline.cut_s)
        self.cluster.heal(self.host)
        self.timeline.t_heal = time.monotonic()

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join(self.timeline.cut_s + 30)


def pick_victim(settings: KafkaSettings, victim: str, *, admin: Any, topic: str, key: str) -> int:
    """The broker id to cut: the one `admin` takes for the controller (where it sends CreateTopics), the
    transaction coordinator of the batch `key`, or the broker leading most partitions of `topic`."""
    if victim == "controller":
        return admin.list_topics(timeout=10).controller_id
    if victim == "coordinator":
        return transaction_coordinator(settings, transactional_id_for(settings, topic, key))
    return busiest_leader(settings, topic)


# -- the producer side ------------------------------------------------------------------------------------------


def _produce(settings: KafkaSettings, topic: str, key: str, first: int, n: int) -> Any:
    return produce_blocks(
        settings,
        ProduceRequest(
            topic=topic,
            ledger_key=key,
            content_hash=f"seq-{first}-{n}",
            source=key,
            seq_len=trials.SEQ_LEN,
            tokenizer=SEQ_TOKENIZER,
            config=PRODUCER_CONFIG,
        ),
        [seq_blocks(first, n, trials.SEQ_LEN)],
    )


class ProduceRun:
    """batch-0 on a slow link in a thread (the cut lands inside its transactions); during the cut, `ensure_topic`
    on the existing topic and batch-1; a batch that raised is retried after the heal, as a step retry would."""

    def __init__(self, settings: KafkaSettings, topic: str, timeline: Timeline, n_blocks: int):
        self.settings, self.topic, self.timeline, self.n = settings, topic, timeline, n_blocks
        self.reports: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.first_data = threading.Event()
        slow = SlowLinkKafkaSettings(bootstrap_servers=settings.bootstrap_servers, client_id=settings.client_id,
                                     produce_delay_s=trials.SLOW_LINK_S)  # fmt: skip
        slow._on_first_data = self.first_data.set
        self._thread = threading.Thread(target=self._batch, args=(slow, "batch-0", 0), name="produce-batch-0")

    def start(self) -> None:
        self._thread.start()

    def _batch(self, settings: KafkaSettings, key: str, first: int) -> None:
        try:
            self.reports[key] = _produce(settings, self.topic, key, first, self.n)
        except Exception as exc:  # noqa: BLE001 - recorded; retried after the heal
            self.errors[key] = f"{type(exc).__name__}: {exc}"[:300] + f" (at {trials._where(exc)})"
        self.timeline.produced[key] = time.monotonic()

    def during_cut(self, admin: Any) -> dict[str, Any]:
        """ensure_topic on the existing topic with `admin` (whose controller may be the cut broker), then batch-1."""
        t0 = time.monotonic()
        try:
            ensure_topic(admin, self.topic, partitions=4, replication_factor=3, min_insync_replicas=2,
                         timeout_s=ENSURE_TIMEOUT_S)  # fmt: skip
            ensure = {"ensure_topic_s": round(time.monotonic() - t0, 1)}
        except Exception as exc:  # noqa: BLE001 - the finding
            ensure = {"ensure_topic_error": f"{type(exc).__name__}: {exc}"[:300]}
        self._batch(self.settings, "batch-1", self.n)
        return ensure

    def finish(self) -> int:
        """Join batch-0, retry what failed (the cut is healed by now); the number of batches that needed a retry."""
        self._thread.join(600)
        retried = [k for k in ("batch-0", "batch-1") if k not in self.reports]
        for key in retried:
            self.reports[key] = _produce(self.settings, self.topic, key, 0 if key == "batch-0" else self.n, self.n)
        return len(retried)

    def audit(self) -> tuple[Any, list[Any]]:
        seen = read_committed(self.settings, self.topic)
        audits = []
        for key, first in (("batch-0", 0), ("batch-1", self.n)):
            verify_produced(self.settings, self.reports[key])
            audits.append(audit(seen, range(first, first + self.n), source=key, report=self.reports[key]))
        return seen, audits


def produce_result(run: ProduceRun, timeline: Timeline, victim: str, retried: int, ensure: dict) -> trials.TrialResult:
    _, (a0, a1) = run.audit()
    ok = a0.ok and a1.ok and not retried and "ensure_topic_error" not in ensure
    return trials.TrialResult(
        kind="cluster_broker_produce", timing_s=timeline.cut_s, victim=victim,
        blocks_claimed=run.reports["batch-0"].blocks + run.reports["batch-1"].blocks, blocks_found=a0.found + a1.found,
        lost=len(a0.lost) + len(a1.lost), duplicated=len(a0.duplicated) + len(a1.duplicated),
        recovery_s=timeline.since_cut(max(timeline.produced.values())), ok=ok, attempts=1 + retried,
        error="; ".join(f"{k}: {v}" for k, v in run.errors.items()), seconds=0.0,
        detail={**ensure, "cut_s": timeline.cut_s, "topic": run.topic, "audits": [a0.summary(), a1.summary()],
                "returned_s_after_cut": {k: timeline.since_cut(t) for k, t in timeline.produced.items()},
                "heal_s_after_cut": timeline.since_cut(timeline.t_heal)},
    )  # fmt: skip


# -- the loader side --------------------------------------------------------------------------------------------


class LoadRun:
    """The bounded loader over a seeded topic with a training step between batches, in a thread."""

    def __init__(self, cluster: Cluster, seeded: trials.SeededTopic, timeline: Timeline):
        self.stack, self.seeded, self.timeline = cluster_stack(cluster), seeded, timeline
        self.out: dict[str, Any] = {}
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loader-under-cut")

    def start(self) -> None:
        self._thread.start()

    def _on_batch(self, n: int) -> None:
        self.timeline.batches.append(time.monotonic())
        self.started.set()

    def _run(self) -> None:
        try:
            self.out["trace"], self.out["seqs"], self.out["digest"] = trials._consume(
                self.stack, self.seeded.topic, step_s=LOADER_STEP_S, on_batch=self._on_batch, **LOADER_BUFFERS
            )
        except Exception as exc:  # noqa: BLE001 - a loader that gives up under the cut is the finding
            self.out["error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            self.started.set()

    def join(self) -> None:
        self._thread.join(900)


def loader_result(run: LoadRun, timeline: Timeline, victim: str) -> trials.TrialResult:
    seeded, out = run.seeded, run.out
    trace, seqs, digest = out.get("trace", []), out.get("seqs", []), out.get("digest", "")
    lost, duplicated, found = trials.delivered_counts(seqs, seeded)
    same = trace == list(seeded.trace) and digest == seeded.digest
    figures = timeline.loader_figures()
    stalled = figures["batches_during_cut"] < len(timeline.batches)  # the cut landed before the end of data
    return trials.TrialResult(
        kind="cluster_broker_loader", timing_s=timeline.cut_s, victim=victim, blocks_claimed=len(seeded.seqs),
        blocks_found=found, lost=lost, duplicated=duplicated, recovery_s=figures["done_s"],
        ok=same and "error" not in out and stalled, error=out.get("error", ""), seconds=0.0,
        detail={**figures, "same_trace": trace == list(seeded.trace), "same_digest": digest == seeded.digest,
                "batches": len(timeline.batches), "topic": seeded.topic, "cut_s": timeline.cut_s,
                "heal_s_after_cut": timeline.since_cut(timeline.t_heal)},
    )  # fmt: skip


# -- the trial ----------------------------------------------------------------------------------------------------


def broker_cut(cluster: Cluster, *, produce: bool, load: bool, victim: str = "controller", cut_s: float = CUT_S,
               delay_s: float = 1.0, seeded: trials.SeededTopic | None = None) -> list[trials.TrialResult]:  # fmt: skip
    """Cut one broker host for `cut_s` while a batch is produced (`produce`) and/or the loader feeds training
    (`load`), both at once when both are asked; heal it; count. `victim`: "controller", "coordinator" (of
    batch-0) or "leader" (of the loader's topic, else the producer's)."""
    t_start = time.monotonic()
    settings, stack = kafka(cluster), cluster_stack(cluster)
    ensure_transaction_state(settings)
    if load and seeded is None:
        seeded = trials.seed_loader_topic(stack, n_blocks=LOADER_BLOCKS)
    topic = trials._new_data_topic(stack, "cut") if produce else None
    admin = settings.make_admin()
    victim_id = pick_victim(settings, victim, admin=admin, topic=seeded.topic if load else topic, key="batch-0")
    host, timeline = f"broker-{victim_id}", Timeline(cut_s)
    loader = LoadRun(cluster, seeded, timeline) if load else None
    producer = ProduceRun(settings, topic, timeline, PRODUCE_BLOCKS) if produce else None
    cutter = Cutter(cluster, host, timeline)
    try:
        if loader:
            loader.start()
            assert loader.started.wait(120), "the loader delivered no first batch"
        if producer:
            producer.start()
            assert producer.first_data.wait(120), "the producer never started its transaction"
        time.sleep(delay_s)
        cutter.start()
        ensure = producer.during_cut(admin) if producer else {}
    finally:
        cutter.join()
    label = f"{victim} kafka-{victim_id}"
    results = []
    if producer:
        results.append(produce_result(producer, timeline, label, producer.finish(), ensure))
    if loader:
        loader.join()
        results.append(loader_result(loader, timeline, label))
    for r in results:
        r.seconds = round(time.monotonic() - t_start, 1)
    return results


# -- bench/reliability.py -----------------------------------------------------------------------------------------

KINDS = ("cluster_broker_produce", "cluster_broker_loader")
VICTIMS = {"cluster_broker_produce": ("controller", "coordinator", "leader"), "cluster_broker_loader": ("leader",)}


def bench_trial(kind: str, i: int, state: dict) -> trials.TrialResult:
    """Trial `i` of a broker-cut kind; the first one brings up a cluster of its own (prefix ppk, 10.83.0.0/24)."""
    if "broker_cluster" not in state:
        from pipeline_project_harness.cluster.spec import fresh_cluster

        state["broker_cluster"] = fresh_cluster("reliability-ppk", "ppk", "10.83.0.0/24")
    victims = VICTIMS[kind]
    produce = kind == "cluster_broker_produce"
    (result,) = broker_cut(state["broker_cluster"], produce=produce, load=not produce, victim=victims[i % len(victims)])
    return result


def bench_close(state: dict) -> None:
    if "broker_cluster" in state:
        state.pop("broker_cluster").down(wipe=True)


def cluster_bench_faults(cluster: Cluster) -> list[dict]:
    """bench/cluster.py: one broker host cut while a batch is produced and the loader reads, at once; the recovery
    seconds after the cut of each (the heal comes at `CUT_S`) and the counts."""
    rows = []
    for r in broker_cut(cluster, produce=True, load=True, victim="controller"):
        d = r.detail
        rows.append({"fault": f"cut broker host ({r.victim}) {CUT_S:.0f} s during {r.kind.rsplit('_', 1)[1]}",
                     "heal_s": d["heal_s_after_cut"], "recovered_s": r.recovery_s, "ok": r.ok,
                     "first_batch_after_heal_s": d.get("first_batch_after_heal_s"),  # seconds after the cut
                     "returned_s": d.get("returned_s_after_cut"), "longest_stall_s": d.get("longest_stall_s"),
                     "blocks": r.blocks_claimed, "found": r.blocks_found, "lost": r.lost,
                     "duplicated": r.duplicated})  # fmt: skip
    return rows
