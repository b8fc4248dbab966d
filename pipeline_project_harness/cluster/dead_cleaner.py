"""A cleaning host lost in the reserve -> publish window (finding 3 of the trust review), on the namespace cluster.

Batch 1's `cleaned_shards` runs on the spare host `trainer-1`. Its dedup attempt is reserved, its exclusion sink
written and its lock confirmed; the manifest PUT is held (a `before-send` hook) and the host's link is cut:

    dead   the host dies behind the cut (its processes SIGKILLed: not even a FIN reaches the PostgreSQL host)
    cut    the host stays cut off for `cut_s`, then comes back and its PUT goes on

Meanwhile batch 2 (half of batch 1's files under other keys, and files of its own) is cleaned from this process.
It meets batch 1's pending keys and waits on the attempt's session lock, which only the PostgreSQL server's
keepalives free (`SERVER_KEEPALIVES`). Counted by content hash against an undisturbed cleaning of what was
published, in the order it was; no attempt left pending; batch 2 finished within `BOUND_S` of the cut.

    python -m pipeline_project_harness.cluster.dead_cleaner child PG_URL UID BATCH MARKER GO   (run on the host)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from dagster_aws.s3 import S3Resource

from pipeline_project.cluster import Cluster, netns
from pipeline_project.stack.config import REPO_ROOT
from pipeline_project_harness.reliability import dedup_trials
from pipeline_project_harness.reliability.outages import fresh_database
from pipeline_project_harness.reliability.publish_trials import _attempt_states
from pipeline_project_harness.reliability.trials import TrialResult

KIND = "cluster_cleaner_host"
VARIANTS = ("dead", "cut")
HOST = "trainer-1"
# the server's keepalives end the orphan session within ~25 s; batch 2's own cleaning takes a few seconds more
BOUND_S = 90.0
_hold: tuple[str, Path, Path] | None = None  # (manifest key suffix, marker, go) in the child


class HeldManifestS3(S3Resource):
    """The child's S3 resource: the first PUT of the manifest writes `marker`, then waits for `go` to exist."""

    def get_client(self):
        client = super().get_client()
        client.meta.events.register_first("before-send.s3.PutObject", _hold_manifest)
        return client


def _hold_manifest(request, **_kwargs):
    suffix, marker, go = _hold
    if request.url.endswith(suffix) and not marker.exists():
        marker.write_text(str(os.getpid()))
        while not go.exists():
            time.sleep(0.2)


def _child(pg_url: str, uid: str, batch: str, marker: str, go: str) -> None:
    global _hold
    from pipeline_project.cleaning.output.publish import manifest_key
    from pipeline_project.settings import Settings

    settings = Settings()
    res = dedup_trials._resources(settings, pg_url, uid, "trial")
    _hold = ("/" + manifest_key(res["layout"].shard_dir(batch)), Path(marker), Path(go))
    res["s3"] = HeldManifestS3(
        endpoint_url=settings.s3_endpoint, region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key, aws_secret_access_key=settings.s3_secret_key,
    )  # fmt: skip
    sys.exit(0 if dedup_trials.clean(res, batch) else 1)


def cleaner_host_lost(cs, *, variant: str, seed: int = 61, cut_s: float = 60.0) -> TrialResult:
    """See the module docstring. `cs`: a `pg_faults.ClusterStack`."""
    cluster: Cluster = cs.cluster
    t0 = time.monotonic()
    settings = cs.settings()
    uid = uuid.uuid4().hex[:8]
    pg_url = fresh_database(cs, f"host_lost_{uid}")
    first, second = dedup_trials._upload_batches(settings, uid, seed)
    host = cluster.host(HOST)
    host.work.mkdir(parents=True, exist_ok=True)
    marker, go = host.work / f"held-{uid}", host.work / f"go-{uid}"
    argv = [sys.executable, "-m", __name__, "child", pg_url, uid, first, str(marker), str(go)]
    log = open(host.work / f"child-{uid}.log", "w")  # noqa: SIM115 - closed below
    child = subprocess.Popen(netns.wrap(host, argv), env={**os.environ, **cluster.env(host), "PYTHONPATH": str(REPO_ROOT)}, cwd=host.work,
                             stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"batch 1 never reached its manifest write (exit {child.returncode}); see {log.name}"
                )
            time.sleep(0.1)
        cluster.cut(HOST)
        t_cut = time.monotonic()
        if variant == "dead":
            cluster.kill(HOST)
        trial = dedup_trials._resources(settings, pg_url, uid, "trial")
        second_ok = dedup_trials.clean(trial, second)
        second_s = time.monotonic() - t_cut
        first_rc = None
        if variant == "cut":
            time.sleep(max(0.0, cut_s - (time.monotonic() - t_cut)))
            cluster.heal(HOST)
            go.touch()
            first_rc = child.wait(600)
    finally:
        cluster.heal(HOST)
        if child.poll() is None:
            child.kill()
        child.wait(30)
        log.close()
    have, published = dedup_trials.published_hashes(trial, [first, second])
    states = _attempt_states(pg_url, f"kill_{uid}_trial")
    reference = dedup_trials._resources(settings, pg_url, uid, "reference")
    order = [second] + ([first] if first in published else [])  # batch 2 published first
    for batch in order:
        dedup_trials.clean(reference, batch)
    want, _ = dedup_trials.published_hashes(reference, order)
    lost, duplicated = sum((want - have).values()), sum((have - want).values())
    ok = (second_ok and second_s <= BOUND_S and lost == 0 and duplicated == 0 and set(states) <= {"published"}
          and (variant == "cut" or first not in published))  # fmt: skip
    return TrialResult(
        kind=KIND, timing_s=0.0, victim=f"cleaning host {variant} in the reserve -> publish window",
        blocks_claimed=sum(want.values()), blocks_found=sum((have & want).values()), lost=lost,
        duplicated=duplicated, recovery_s=second_s, ok=ok, attempts=1, seconds=time.monotonic() - t0,
        error="" if second_ok else "batch 2 failed",
        detail={"variant": variant, "batch_2_cleaned": second_ok, "batch_2_seconds_after_cut": round(second_s, 1),
                "bound_s": BOUND_S, "batch_1_exit": first_rc, "batch_1_published": first in published,
                "attempt_states": dict(states), "documents_published": sum(have.values()),
                "documents_reference": sum(want.values())},
    )  # fmt: skip


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    _child(*sys.argv[2:7])
