"""Faults of the PostgreSQL host and the Dagster host on the namespace cluster, run against the cluster's own
Dagster deployment (webserver + daemon on the `dagster` host, storage on the `postgres` host, the real
`raw_s3_sensor` and `ingest_batch`), watched from the operator's seat.

* `pg_cut_during_run`: objects arrive, the sensor's run starts; once its `step` runs (`cleaned_shards`: the
  dedup index is read and written; `token_blocks`: only run storage and the event log are), the PostgreSQL
  host's link goes down for `cut_s` and comes back. The run must not stay STARTED: it finishes, or fails and
  run retries launch it again. Counted by content hash: the batch's published documents against an undisturbed
  cleaning of the same input (`outages.reference_cleaning`, its own database); no dedup attempt of the batch
  left pending; the batch's blocks in the topic exactly once (`dagster_faults.batch_exactly_once`).
* `daemon_kill`: `dagster_faults.daemon_kill_mid_run` on the cluster: the daemon tree on the dagster host
  SIGKILLed while a run is in flight and objects keep arriving; the daemon restarted by `Cluster.up`.

`ClusterStack` gives the trials of `pipeline_project_harness/reliability/` the few parts of `Stack` they use, so
the loopback trials run across hosts unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections import Counter
from typing import Any

from pipeline_project.cluster import Cluster
from pipeline_project_harness.reliability import dagster_faults as df
from pipeline_project_harness.reliability.outages import CleanedBatch, reference_cleaning
from pipeline_project_harness.reliability.trials import TrialResult

KINDS = ("cluster_pg_cleaning", "cluster_pg_run", "cluster_daemon")
CUT_AFTER = [0.5, 2.0, 4.0]  # seconds after the step starts; bench trials cycle through them


class ClusterStack:
    """The cluster seen through `Stack`'s `config`, `settings()`, `services`, `process(name)` and `up()`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.config = cluster.spec.stack_config()
        self.dagster_host = cluster.host("dagster")
        self.services = {"dagster": cluster.service(self.dagster_host)}

    def settings(self):
        return self.cluster.settings()

    def process(self, name: str):
        return next(mp for mp in self.services["dagster"].processes() if mp.name == name)

    def up(self, services=None, timeout: float = 240.0) -> None:
        self.cluster.up(timeout=timeout)  # starts only what is not running, on its own host


def upload_sample(cs: ClusterStack, seed: int) -> list[str]:
    """The files `reference_cleaning(seed)` cleans, under a fresh `raw/<ns clock>-<id>/` prefix for the sensor."""
    from pipeline_project.demo.sample.corpus import generate

    settings = cs.settings()
    s3 = settings.s3_client()
    prefix = f"{settings.raw_prefix}{time.time_ns()}-{uuid.uuid4().hex[:6]}/"
    keys = []
    for f in generate(seed=seed, docs_per_language=2):
        key = prefix + f.key.removeprefix("raw/sample/")
        s3.put_object(Bucket=settings.bucket, Key=key, Body=f.data)
        keys.append(key)
    return keys


def published_texts(cs: ClusterStack, batch: str) -> Counter:
    """sha256 of every document the deployment published for `batch` (its default layout)."""
    from pipeline_project.defs.resources import build_resources
    from pipeline_project_harness.reliability.dedup_trials import published_hashes

    hashes, _ = published_hashes(build_resources(cs.settings()), [batch])
    return hashes


def cross_batch_drops(cs: ClusterStack, batch: str) -> Counter:
    """sha256 of every document of `batch` dropped as a duplicate of another batch's (its exclusion sink): earlier
    trials on the same deployment published documents that a later input may repeat."""
    import io
    import json

    import zstandard

    from pipeline_project.cleaning.output.publish import read_shard_manifest
    from pipeline_project.defs.resources import build_resources

    layout = build_resources(cs.settings())["layout"]
    s3 = cs.settings().s3_client()
    manifest = read_shard_manifest(s3, layout.bucket, layout.shard_dir(batch))
    body = s3.get_object(Bucket=layout.bucket, Key=manifest.exclusions)["Body"].read()
    lines = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read().decode().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return Counter(
        hashlib.sha256(r["text"].encode()).hexdigest()
        for r in records
        if "_duplicate_of:" in r.get("reason", "") and not r["reason"].split(":", 1)[1].startswith(f"{batch}/")
    )


def dedup_attempts(cs: ClusterStack, batch: str, schema: str = "dedup") -> Counter:
    """State -> count of the deployed dedup index's attempts for `batch`."""
    import psycopg2

    conn = psycopg2.connect(cs.settings().postgres_url, connect_timeout=10)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"SELECT state, count(*) FROM {schema}.dedup_attempts WHERE batch_id = %s GROUP BY 1", (batch,))
            return Counter(dict(cur.fetchall()))
    finally:
        conn.close()


def _in_step(instance, run_id: str, step: str):
    """The newest of the run and its retries (a run can fail before its first step on a loaded machine, e.g. when
    the daemon's call to the code server times out) if it is executing `step`, else None."""
    run = instance.get_run_by_id(run_id)
    while (retry := df.retry_of(instance, run.run_id)) is not None:
        run = retry
    return run if not run.is_finished and df.step_started(instance, run.run_id, step) else None


def _settle(instance, run_id: str, timeout: float) -> tuple[str, Any]:
    """Wait for the run to finish; when it failed, for the retry the daemon launches and its end. Queries that
    fail while the store recovers are asked again. Returns the run's status and the last run (itself or a retry)."""

    def finished():
        with contextlib.suppress(Exception):
            return instance.get_run_by_id(run_id).is_finished
        return False

    df.wait_for(f"run {run_id} to leave STARTED", finished, timeout, 1.0, story=lambda: df.run_story(instance, run_id))
    status = df.status_of(instance, run_id).value
    last = instance.get_run_by_id(run_id)
    while last.status.value == "FAILURE":
        retry = df.wait_for(f"a retry of {last.run_id}", lambda r=last.run_id: df.retry_of(instance, r), 180)
        df.wait_run_done(instance, retry.run_id, timeout)
        last = instance.get_run_by_id(retry.run_id)
    return status, last


def pg_cut_during_run(
    cs: ClusterStack, instance, reference: CleanedBatch, *, seed: int, step: str = "cleaned_shards",
    cut_after_s: float = 0.5, cut_s: float = 30.0, timeout: float = 600.0,
) -> TrialResult:  # fmt: skip
    """See the module docstring. `reference`: `reference_cleaning(cs, seed)`, the same input undisturbed."""
    t0 = time.monotonic()
    keys = upload_sample(cs, seed)
    batch = df.batch_of(cs, instance, keys)
    first = df.run_of(instance, batch)
    run = df.wait_for(f"step {step} of run {first.run_id} or a retry of it to run", lambda: _in_step(instance,
                      first.run_id, step), 300, story=lambda: df.run_story(instance, first.run_id))  # fmt: skip
    time.sleep(cut_after_s)
    in_flight = not instance.get_run_by_id(run.run_id).is_finished
    cs.cluster.cut("postgres")
    t_cut = time.monotonic()
    try:
        time.sleep(cut_s)
    finally:
        cs.cluster.heal("postgres")
    status, last = _settle(instance, run.run_id, timeout)
    recovery_s = time.monotonic() - t_cut - cut_s
    final = last.status.value
    have = published_texts(cs, batch) if final == "SUCCESS" else Counter()
    want = Counter(reference.texts)
    attempts = dedup_attempts(cs, batch)
    once = df.batch_exactly_once(cs, batch) if final == "SUCCESS" else {"ok": False}
    # a document the reference kept may be one an earlier batch on this deployment published: dropped, named
    explained = (want - have) & cross_batch_drops(cs, batch) if final == "SUCCESS" else Counter()
    lost, duplicated = sum((want - have - explained).values()), sum((have - want).values())
    ok = (in_flight and final == "SUCCESS" and lost == 0 and duplicated == 0 and once["ok"]
          and attempts == Counter({"published": 1}))  # fmt: skip
    kind = "cluster_pg_cleaning" if step == "cleaned_shards" else "cluster_pg_run"
    return TrialResult(
        kind=kind, timing_s=cut_after_s, victim=f"postgres host cut {cut_s:g}s during {step}",
        blocks_claimed=sum(want.values()), blocks_found=sum((have & want).values()) + sum(explained.values()), lost=lost,
        duplicated=duplicated, recovery_s=recovery_s, ok=ok, attempts=1 + (last.run_id != run.run_id),
        error="" if final == "SUCCESS" else df.run_story(instance, last.run_id, last=8)[:500],
        seconds=time.monotonic() - t0,
        detail={"batch": batch, "run": run.run_id, "cut_while_running": in_flight, "run_status": status,
                "final_run": last.run_id, "final_status": final, "dedup_attempts": dict(attempts),
                "documents_published": sum(have.values()), "documents_reference": sum(want.values()),
                "dropped_as_duplicates_of_earlier_batches": sum(explained.values()),
                "exactly_once": once, "recovery_s_after_heal": recovery_s},
    )  # fmt: skip


def daemon_kill(cs: ClusterStack, instance, *, seed: int, down_s: float = 20.0) -> TrialResult:
    r = df.daemon_kill_mid_run(cs, instance, down_s=down_s, seed=seed)
    r.kind = "cluster_daemon"
    r.victim = f"dagster host's daemon tree, down {down_s:g}s"
    return r


# -- bench/reliability.py -------------------------------------------------------------------------------------


def bench_cluster(state: dict) -> ClusterStack:
    """The bench's cluster (prefix ppr, 10.81.0.0/24), brought up by the first trial that needs it."""
    if "cluster" not in state:
        from pipeline_project_harness.cluster.spec import fresh_cluster

        cluster = state["cluster"] = fresh_cluster("reliability", "ppr", "10.81.0.0/24")
        state["cs"] = ClusterStack(cluster)
        state["cluster_instance"] = df.dagster_instance(state["cs"])
    return state["cs"]


def bench_trial(kind: str, i: int, state: dict) -> TrialResult:
    """Trial `i` of a cluster kind; the first one brings up a cluster of its own (prefix ppr, 10.81.0.0/24)."""
    cs = bench_cluster(state)
    instance = state["cluster_instance"]
    seed = 500 + 10 * KINDS.index(kind) + i
    if kind == "cluster_daemon":
        return daemon_kill(cs, instance, seed=seed)
    step = "cleaned_shards" if kind == "cluster_pg_cleaning" else "token_blocks"
    reference = reference_cleaning(cs, seed)
    return pg_cut_during_run(cs, instance, reference, seed=seed, step=step, cut_after_s=CUT_AFTER[i % len(CUT_AFTER)])


def bench_close(state: dict) -> None:
    if "cluster" in state:
        state.pop("cluster_instance").dispose()
        state.pop("cluster").down(wipe=True)


def cluster_bench_faults(cluster: Cluster, seed: int = 700) -> list[dict]:
    """bench/cluster.py: one PostgreSQL-host cut in cleaned_shards and one daemon kill on `cluster`, as rows."""
    cs = ClusterStack(cluster)
    instance = df.dagster_instance(cs)
    try:
        reference = reference_cleaning(cs, seed)
        trials = [pg_cut_during_run(cs, instance, reference, seed=seed), daemon_kill(cs, instance, seed=seed + 1)]
    finally:
        instance.dispose()
    return [
        {"fault": r.victim, "kind": r.kind, "ok": r.ok, "lost": r.lost, "duplicated": r.duplicated,
         "recovery_s": r.recovery_s, "seconds": r.seconds, "detail": r.detail,
         "line": f"{r.victim}: {'ok' if r.ok else 'NOT OK'}, {r.lost} lost, {r.duplicated} duplicated, "
                 + (f"recovered {r.recovery_s:.0f} s " if r.recovery_s is not None else "not recovered ")
                 + ("after the heal" if r.kind != "cluster_daemon" else "after the kill (orphaned run failed)")}
        for r in trials
    ]  # fmt: skip
