"""Lost answers to the writes of a batch (finding 4 of the trust review and its class): the write is applied, the
answer never arrives. With one answer lost, botocore's retry is answered; with every attempt's answer lost,
botocore raises after the object was stored. For the manifest, `cleaned_shards` must read it back and keep what it
names; for a shard, the attribute file or the exclusion sink (written under the attempt's own keys before the
manifest names them) the attempt is abandoned, its objects removed, and the step's retry publishes the batch.

`lost_answers` cleans batch 1 (ten sample files) with the answers to one of its writes (`WRITES`) dropped by
`LoseResponses`, inside the asset's own S3 client, then batch 2 (half of batch 1's files under other keys, and
files of its own) undisturbed. Counted by content hash: the documents of both published manifests against an
undisturbed run of the same input; every object each manifest names is read back; no object is left under batch
1's prefixes that its manifest does not name; no attempt is left pending.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

from dagster_aws.s3 import S3Resource

from pipeline_project.settings import Settings
from pipeline_project_harness.reliability import dedup_trials
from pipeline_project_harness.reliability.lost_response import LoseResponses
from pipeline_project_harness.reliability.trials import TrialResult

S3_ATTEMPTS = 5  # S3Resource's max_attempts: losing this many answers makes botocore raise
LOST = (1, S3_ATTEMPTS)
# the write -> the end of its key (batch 1's own: batch 2 is cleaned after the answers are back)
WRITES = {
    "manifest": "/manifest.json",
    "shard": "/shard-00000.jsonl.zst",
    "attributes": "/attributes.parquet",
    "sink": "/excluded.jsonl.zst",
}
_losing: LoseResponses | None = None


class LosingS3Resource(S3Resource):
    """The asset's S3 resource, whose clients lose the answers the active `LoseResponses` picks."""

    def get_client(self):
        client = super().get_client()
        return _losing.attach(client) if _losing is not None else client


def _attempt_states(pg_url: str, schema: str) -> Counter:
    import psycopg2

    conn = psycopg2.connect(pg_url, connect_timeout=10)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f'SELECT state, count(*) FROM "{schema}".dedup_attempts GROUP BY 1')
            return Counter(dict(cur.fetchall()))
    finally:
        conn.close()


def unreferenced(s3, bucket: str, prefixes: list[str], manifest) -> list[str]:
    """Objects under `prefixes` that `manifest` (the batch's publication) does not name (directory markers of
    filesystem-backed servers aside)."""
    from pipeline_project.cleaning.output.publish import MANIFEST_NAME

    named = {e.key for e in manifest.shards} | {manifest.exclusions, manifest.attributes}
    found = []
    for prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found += [o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith((MANIFEST_NAME, "/"))]
    return sorted(set(found) - named)


def lost_manifest_answers(settings: Settings, pg_url: str, *, lost: int, seed: int = 43) -> TrialResult:
    return lost_answers(settings, pg_url, write="manifest", lost=lost, seed=seed)


def lost_answers(settings: Settings, pg_url: str, *, write: str, lost: int, seed: int = 43) -> TrialResult:
    """See the module docstring. `pg_url`: a database of this trial (the index lives in schemas of its own)."""
    global _losing
    from pipeline_project.cleaning.output.publish import read_shard_manifest, verify_published

    t0 = time.monotonic()
    uid = uuid.uuid4().hex[:8]
    first, second = dedup_trials._upload_batches(settings, uid, seed)
    trial = dedup_trials._resources(settings, pg_url, uid, "trial")
    trial["s3"] = LosingS3Resource(
        endpoint_url=settings.s3_endpoint, region_name=settings.s3_region, max_attempts=S3_ATTEMPTS,
        aws_access_key_id=settings.s3_access_key, aws_secret_access_key=settings.s3_secret_key,
    )  # fmt: skip
    layout = trial["layout"]
    loss = LoseResponses(None, "PutObject", key_suffix=WRITES[write], count=lost)
    _losing = loss
    try:
        with loss:
            t1 = time.monotonic()
            first_ok = dedup_trials.clean(trial, first)
            first_s = time.monotonic() - t1
    finally:
        _losing = None
    second_ok = dedup_trials.clean(trial, second)
    have, published = dedup_trials.published_hashes(trial, [first, second])
    s3 = settings.s3_client()
    missing = [
        key
        for batch in published
        for key in verify_published(s3, layout.bucket, read_shard_manifest(s3, layout.bucket, layout.shard_dir(batch)))
    ]
    states = _attempt_states(pg_url, f"kill_{uid}_trial")
    orphans = []
    if first in published:
        manifest = read_shard_manifest(s3, layout.bucket, layout.shard_dir(first))
        orphans = unreferenced(s3, layout.bucket, [layout.shard_dir(first), layout.exclusions_dir(first)],
                               manifest)  # fmt: skip

    reference = dedup_trials._resources(settings, pg_url, uid, "reference")
    for batch in (first, second):
        dedup_trials.clean(reference, batch)
    want, _ = dedup_trials.published_hashes(reference, [first, second])
    lost_docs, duplicated = sum((want - have).values()), sum((have - want).values())
    ok = (first_ok and second_ok and published == [first, second] and loss.applied == [200] * lost and not missing
          and not orphans and lost_docs == 0 and duplicated == 0 and set(states) == {"published"})  # fmt: skip
    return TrialResult(
        kind=f"lost_{write}_answer", timing_s=0.0, victim=f"{lost} of the {write} PUT's answers lost",
        blocks_claimed=sum(want.values()), blocks_found=sum((have & want).values()), lost=lost_docs,
        duplicated=duplicated, recovery_s=None, ok=ok, attempts=loss.attempts, seconds=time.monotonic() - t0,
        error="" if first_ok else "cleaned_shards of batch 1 failed",
        detail={"answers_lost": lost, "statuses_of_lost_answers": loss.applied, "put_attempts": loss.attempts,
                "batch_1_cleaned": first_ok, "batch_1_seconds": round(first_s, 2), "batch_2_cleaned": second_ok,
                "published": len(published), "objects_missing": missing[:10], "attempt_states": dict(states),
                "objects_unreferenced": orphans[:10],
                "documents_published": sum(have.values()), "documents_reference": sum(want.values())},
    )  # fmt: skip
