"""Kill `cleaned_shards` between two of its stores, clean an overlapping batch, abandon the first: no document lost.

`index_commit_kill` runs batch 1's `cleaned_shards` in a child process that SIGKILLs itself at `kill_at`:

    before_exclusions   the dedup index holds the batch's rows, nothing else is written
    before_manifest     ... and the exclusion sink is written (the window of issue 27)
    after_manifest      the manifest is written, the index not yet told
    before_cleanup      everything is published; the superseded objects are not deleted yet

Batch 2 (half of batch 1's files, copied under other keys, and files of its own) is then cleaned in this process;
batch 1 is never re-run. Counted by content hash: the documents of every published manifest against an
undisturbed run of the same input (batch 1 then batch 2 when batch 1's manifest exists, else batch 2 alone).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import time
import uuid
from collections import Counter

from pipeline_project.defs.resources.layout import TopicConfig
from pipeline_project.settings import Settings
from pipeline_project_harness.reliability.trials import TrialResult

KILL_POINTS = ("before_exclusions", "before_manifest", "after_manifest", "before_cleanup")


def _resources(settings: Settings, pg_url: str, uid: str, shards: str) -> dict:
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.dedup import DedupIndexResource
    from pipeline_project.defs.resources.layout import PipelineLayout

    res = build_resources(settings)
    res["layout"] = PipelineLayout(
        bucket=settings.bucket,
        raw_prefix=f"kill-{uid}/raw/",
        shards_prefix=f"kill-{uid}/{shards}/shards/",
        exclusions_prefix=f"kill-{uid}/{shards}/exclusions/",
        checkpoints_prefix=f"kill-{uid}/checkpoints/",
        topic=TopicConfig(name=f"kill-{uid}-blocks", seq_len=64),
    )
    res["dedup"] = DedupIndexResource(postgres_url=pg_url, schema_name=f"kill_{uid}_{shards}")
    res["cleaning"] = CleaningResource(workers=1)
    return res


def _upload_batches(settings: Settings, uid: str, seed: int) -> tuple[str, str]:
    """Batch 1: ten sample files; batch 2: the last five of them under other keys, and six files of its own."""
    from pipeline_project.demo.sample.corpus import generate
    from pipeline_project.ingest.manifest import BatchManifest, RawObject, make_batch_id, write_manifest_once

    s3, bucket = settings.s3_client(), settings.bucket
    files = generate(seed=seed, docs_per_language=2)
    plan = {1: [(f, "one") for f in files[:10]], 2: [(f, "two") for f in files[5:]]}
    batches = []
    for n, items in plan.items():
        objects = []
        for f, where in items:
            key = f"kill-{uid}/raw/{where}/{f.key.removeprefix('raw/sample/')}"
            s3.put_object(Bucket=bucket, Key=key, Body=f.data)
            head = s3.head_object(Bucket=bucket, Key=key)
            objects.append(
                RawObject(
                    key=key,
                    etag=head["ETag"].strip('"'),
                    size=head["ContentLength"],
                    last_modified=head["LastModified"].isoformat(),
                )
            )
        batch = make_batch_id(objects) + f"-{n}"
        write_manifest_once(s3, BatchManifest(batch_id=batch, bucket=bucket, objects=tuple(objects)))
        batches.append(batch)
    return batches[0], batches[1]


def clean(resources: dict, batch: str) -> bool:
    """Materialize `cleaned_shards` for one batch in this process (a throw-away Dagster instance)."""
    import dagster as dg

    from pipeline_project.defs.assets.cleaned import cleaned_shards
    from pipeline_project.defs.partitions import batches

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(batches.name, [batch])
        result = dg.materialize([cleaned_shards], resources=resources, partition_key=batch, instance=instance,
                                raise_on_error=False)  # fmt: skip
        return result.success


def _die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def _clean_and_die(settings: Settings, pg_url: str, uid: str, batch: str, kill_at: str) -> None:
    """Child process: clean `batch`, SIGKILL this process at `kill_at` (patched into the publish path)."""
    from pipeline_project.cleaning.output import publish
    from pipeline_project.cleaning.output.writer import BatchWriter

    if kill_at == "before_exclusions":
        BatchWriter.upload_exclusions = _die
    elif kill_at == "before_manifest":
        publish.write_manifest = _die
    elif kill_at == "after_manifest":
        write = publish.write_manifest
        publish.write_manifest = lambda *a, **k: (write(*a, **k), _die())
    elif kill_at == "before_cleanup":
        publish.delete_superseded = _die
    clean(_resources(settings, pg_url, uid, "trial"), batch)
    os._exit(3)  # not killed: the kill point was never reached


def published_hashes(resources: dict, batches: list[str]) -> tuple[Counter, list[str]]:
    """sha256 of every document of every published manifest of `batches`; the batches that have one."""
    from pipeline_project.cleaning.output.publish import iter_shard_texts, read_shard_manifest_or_none

    layout, s3 = resources["layout"], resources["s3"].process_config_and_initialize().get_client()
    hashes: Counter = Counter()
    published = []
    for batch in batches:
        manifest = read_shard_manifest_or_none(s3, layout.bucket, layout.shard_dir(batch))
        if manifest is not None:
            published.append(batch)
            hashes.update(hashlib.sha256(t.encode()).hexdigest() for t in iter_shard_texts(s3, layout.bucket, manifest))
    return hashes, published


def index_commit_kill(
    settings: Settings, pg_url: str, *, kill_at: str = "before_manifest", seed: int = 41
) -> TrialResult:
    """See the module docstring. `pg_url`: a database of this trial (the index lives in schemas of its own)."""
    t0 = time.monotonic()
    uid = uuid.uuid4().hex[:8]
    first, second = _upload_batches(settings, uid, seed)
    child = multiprocessing.get_context("spawn").Process(
        target=_clean_and_die, args=(settings, pg_url, uid, first, kill_at)
    )
    child.start()
    child.join(600)
    killed = child.exitcode == -signal.SIGKILL
    trial = _resources(settings, pg_url, uid, "trial")
    second_ok = clean(trial, second)
    have, published = published_hashes(trial, [first, second])

    reference = _resources(settings, pg_url, uid, "reference")
    for batch in (first, second) if first in published else (second,):
        clean(reference, batch)
    want, _ = published_hashes(reference, [first, second])
    lost = sum((want - have).values())
    duplicated = sum((have - want).values())
    return TrialResult(
        kind="dedup_index_commit_kill", timing_s=0.0, victim=f"cleaned_shards killed {kill_at}",
        blocks_claimed=sum(want.values()), blocks_found=sum((have & want).values()), lost=lost,
        duplicated=duplicated, recovery_s=None, ok=killed and second_ok and lost == 0 and duplicated == 0,
        attempts=1, error="" if killed else f"the child was not killed (exit code {child.exitcode})",
        seconds=time.monotonic() - t0,
        detail={"kill_at": kill_at, "first_published": first in published, "second_cleaned": second_ok,
                "documents_published": sum(have.values()), "documents_reference": sum(want.values())},
    )  # fmt: skip
