"""The dedup index split across two PostgreSQL hosts of the namespace cluster, one of them cut for 30 s while two
writers race on overlapping documents (issue 38, section 5).

The cluster's own `postgres` host holds shard 0; shard 1 is a second PostgreSQL server started for the trial on
the bare host `trainer-2` (its address, its own data under that host's state directory), so cutting `trainer-2`
cuts exactly one shard host. Two writers, batches `a` and `b`, each reserve -> "manifest" -> publish their own
documents and a shared set (exact duplicates of each other, spread over both shards) through a
`ShardedDedupIndex`, retrying a whole attempt after any `DedupStoreUnavailableError` or `AttemptLostError` as a
step retry would. The "manifest" is a dict written between `confirm` and `publish`, which `is_published` reads.

Counted from the shards' tables afterwards: every document of either batch published exactly once across both
shards, each shared document by exactly one of the batches, and no attempt left pending on either shard.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline_project.cluster import Cluster, netns
from pipeline_project.stack.postgres import PostgresService
from pipeline_project.stack.processes import stop_all
from pipeline_project_harness.cluster.broker_faults import Cutter, Timeline

SHARD_HOST = "trainer-2"
RETRY_FOR_S = 240.0  # a writer's attempts, all together: the cut plus the clients' timeouts on each side of it
PAUSE_S = 2.0  # between confirm and publish: the manifest write the cut lands in


@dataclass
class Writer:
    batch: str
    keys: list[int]
    tries: list[str] = field(default_factory=list)  # the error of every failed attempt
    late: dict[int, str] = field(default_factory=dict)  # row -> reason, of the attempt that published
    done_s: float | None = None
    reserved: threading.Event = field(default_factory=threading.Event)  # its first reserve went through


class ShardHost:
    """A PostgreSQL server on `trainer-2`, reached at that host's address; stopped by `stop`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.host = cluster.host(SHARD_HOST)
        base = cluster.spec.host_config(self.host)
        self.config = dataclasses.replace(base, addresses={**base.addresses, "postgres": self.host.address})
        self.service = PostgresService(self.config)
        self._procs: list[Any] = []

    @property
    def url(self) -> str:
        return self.config.postgres_url()

    def start(self, timeout_s: float = 120.0) -> None:
        self.service.prepare()
        for mp in self.service.processes():
            wrapped = dataclasses.replace(
                mp,
                cmd=netns.wrap(self.host, mp.cmd),
                env={**self.cluster.env(self.host), **(mp.env or {})},
                cwd=mp.cwd or self.host.work,
            )
            wrapped.spawn()
            self._procs.append(mp)
        deadline = time.monotonic() + timeout_s
        while not self.service.is_healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the shard PostgreSQL on {SHARD_HOST} not healthy after {timeout_s:.0f}s")
            time.sleep(0.5)
        self.service.after_healthy()

    def stop(self) -> None:
        stop_all(self._procs)


def _keys(seed: int, n: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(k) for k in rng.integers(1 << 40, 1 << 62, size=n, dtype=np.int64)]


def _write(urls: list[str], schema: str, writer: Writer, manifests: dict[str, str], started: float) -> None:
    from pipeline_project.cleaning.dedup.attempts import AttemptLostError
    from pipeline_project.cleaning.dedup.postgres import DedupStoreUnavailableError
    from pipeline_project.cleaning.dedup.sharded import ShardedDedupIndex

    n = len(writer.keys)
    rows = (
        [f"{writer.batch}-{k}" for k in writer.keys],
        np.array(writer.keys, dtype=np.uint64),
        np.zeros((n, 14), np.uint64),
        np.zeros((n, 112), np.uint32),
    )
    while time.monotonic() - started < RETRY_FOR_S:
        index = ShardedDedupIndex(urls, schema=schema, is_published=lambda b, a: manifests.get(b) == a, wait_s=60)
        attempt = f"{writer.batch}-{uuid.uuid4().hex[:8]}"
        try:
            index.begin_batch(writer.batch)
            late = index.reserve_batch(writer.batch, attempt, *rows, near_threshold=0.8)
            writer.reserved.set()
            index.confirm(attempt)
            time.sleep(PAUSE_S)
            manifests[writer.batch] = attempt  # the manifest names the attempt: from here it is published
            index.publish(attempt)
            writer.late, writer.done_s = late, time.monotonic() - started
            return
        except (DedupStoreUnavailableError, AttemptLostError) as exc:
            writer.tries.append(f"{type(exc).__name__}: {exc}"[:200])
            time.sleep(1.0)
        except Exception as exc:  # noqa: BLE001 - not one a step retry rides out: the finding, and the writer stops
            writer.tries.append(f"unexpected {type(exc).__name__}: {exc}"[:300])
            return
        finally:
            index.close()
    writer.tries.append(f"gave up after {RETRY_FOR_S:.0f}s")


def _published(url: str, schema: str) -> tuple[Counter, Counter]:
    """(doc ids of published rows, attempt states) on one shard."""
    import psycopg2

    conn = psycopg2.connect(url, options=f"-c search_path={schema}")
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT k.doc_id FROM dedup_kept k JOIN dedup_attempts a ON a.num = k.attempt "
                "WHERE a.state = 'published'"
            )
            docs = Counter(row[0] for row in cur.fetchall())
            cur.execute("SELECT state FROM dedup_attempts")
            states = Counter(row[0] for row in cur.fetchall())
        return docs, states
    finally:
        conn.close()


def _drop_schema(url: str, schema: str) -> None:
    import psycopg2

    try:
        conn = psycopg2.connect(url, connect_timeout=10)
        with conn, conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()
    except psycopg2.Error:
        pass  # best effort: a schema of its own, named by the trial


def shard_host_cut(cluster: Cluster, *, cut_s: float = 30.0, own: int = 300, shared: int = 200) -> dict[str, Any]:
    """Two writers racing across two shard hosts, the second host cut for `cut_s` once the first reserve is in."""
    shard = ShardHost(cluster)
    shard.start()
    schema = f"shards_{uuid.uuid4().hex[:8]}"
    urls = [cluster.settings().postgres_url, shard.url]
    common = _keys(1, shared)
    writers = [Writer("a", _keys(2, own) + common), Writer("b", common + _keys(3, own))]
    manifests: dict[str, str] = {}
    timeline = Timeline(cut_s=cut_s)
    try:
        started = time.monotonic()
        threads = [threading.Thread(target=_write, args=(urls, schema, w, manifests, started)) for w in writers]
        for t in threads:
            t.start()
        # the cut lands once a writer's rows are reserved (pending on both shards) and before it publishes, while
        # the other writer reserves, or waits on those pending keys
        deadline = time.monotonic() + 120
        while not any(w.reserved.is_set() for w in writers) and time.monotonic() < deadline:
            time.sleep(0.05)
        cut_at = time.monotonic() - started
        cutter = Cutter(cluster, SHARD_HOST, timeline)
        cutter.start()
        for t in threads:
            t.join(RETRY_FOR_S + 60)
        cutter.join()
        per_shard = [_published(url, schema) for url in urls]
    finally:
        if timeline.t_cut and not timeline.t_heal:
            cluster.heal(SHARD_HOST)
        _drop_schema(urls[0], schema)  # the shard host's data goes with its server's state
        shard.stop()
    docs = sum((d for d, _ in per_shard), Counter())
    copies = {f"{w.batch}-{k}": docs[f"{w.batch}-{k}"] for w in writers for k in set(w.keys) - set(common)}
    copies.update({f"shared-{k}": docs[f"a-{k}"] + docs[f"b-{k}"] for k in common})
    return {
        "writers": {w.batch: {"tries": w.tries, "late_drops": len(w.late), "done_s": w.done_s} for w in writers},
        "shard_docs": [sum(d.values()) for d, _ in per_shard],
        "attempt_states": [dict(s) for _, s in per_shard],
        "expected": len(copies),
        "missing": sorted(doc for doc, n in copies.items() if n == 0),
        "extra": sorted(doc for doc, n in copies.items() if n > 1),
        "shared_by_a": sum(1 for k in common if docs[f"a-{k}"]),
        "cut_s": cut_s,
        "cut_at_s": round(cut_at, 1),
    }


KIND = "cluster_dedup_shard_cut"


def trial(cluster: Cluster, i: int, cut_s: float = 30.0) -> Any:
    """bench/reliability.py's row of one `shard_host_cut`: documents in place of blocks."""
    from pipeline_project_harness.reliability.trials import TrialResult

    got = shard_host_cut(cluster, cut_s=cut_s)
    writers = got["writers"].values()
    done = [w["done_s"] for w in writers]
    pending = sum(s.get("pending", 0) for s in got["attempt_states"])
    lost, duplicated = len(got["missing"]), len(got["extra"])
    ok = not lost and not duplicated and None not in done and not pending
    return TrialResult(
        kind=KIND, timing_s=got["cut_at_s"], victim=f"shard host {SHARD_HOST} cut {cut_s:.0f} s while two writers race",
        blocks_claimed=got["expected"], blocks_found=got["expected"] - lost, lost=lost, duplicated=duplicated,
        recovery_s=None if None in done else round(max(done) - got["cut_at_s"], 1), ok=ok,
        attempts=1 + sum(len(w["tries"]) for w in writers), error="; ".join(t for w in writers for t in w["tries"])[:300],
        detail={**got, "trial": i, "pending_attempts": pending},
    )  # fmt: skip
