"""Outage trials: a service of the throw-away stack goes away in the middle of a materialization or a training run
and comes back (or not) without a person.

* `s3_outage_during_cleaning`: the S3 server is SIGKILLed while `cleaned_shards` runs (in process, real resources,
  the asset's own retry policy), then restarted. The published documents are compared, by content hash, with an
  undisturbed run of the same input (`reference_cleaning`).
* `mlflow_down_during_training`: the MLflow server (and its workers) is SIGKILLed while the trainer runs; the
  checkpoint must still land in S3 with `latest.json` pointing at it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline_project.defs.resources.layout import TopicConfig
from pipeline_project.stack import Stack
from pipeline_project_harness.reliability.faults import restart, sigkill
from pipeline_project_harness.reliability.training_trials import (
    REPO,
    _checkpoint_state,
    reference_batches,
    seed_training_topic,
    trainer_cmd,
    trainer_env,
    trainer_job,
    trainer_result,
)
from pipeline_project_harness.reliability.trials import TrialResult

# -- S3 down while cleaned_shards runs -----------------------------------------------------------------------


@dataclass(frozen=True)
class CleanedBatch:
    success: bool
    counts: dict[str, int]  # documents in / kept / dropped / quarantined, from the materialization's metadata
    texts: tuple[str, ...]  # sha256 of every published document, in shard order
    materializations: int  # cleaned_shards materializations the run recorded
    step_restarts: int  # STEP_RESTARTED events of cleaned_shards (the retry policy at work)
    checks: dict[str, bool]
    failure: str = ""


def fresh_database(stack: Stack, name: str) -> str:
    """A new, empty PostgreSQL database on the throw-away stack (its own dedup index); returns its URL."""
    import psycopg2

    conn = psycopg2.connect(stack.config.postgres_url("postgres"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return stack.config.postgres_url(name)


def _layout_and_resources(stack: Stack, uid: str) -> tuple[Any, dict]:
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.dedup import DedupIndexResource
    from pipeline_project.defs.resources.layout import PipelineLayout

    layout = PipelineLayout(
        raw_prefix=f"rel-{uid}/raw/",
        shards_prefix=f"rel-{uid}/shards/",
        exclusions_prefix=f"rel-{uid}/exclusions/",
        checkpoints_prefix=f"rel-{uid}/checkpoints/",
        topic=TopicConfig(name=f"rel-{uid}-blocks", seq_len=64, message_bytes=16 * 1024),
    )
    resources = build_resources(stack.settings())
    resources["layout"] = layout
    resources["dedup"] = DedupIndexResource(postgres_url=fresh_database(stack, f"rel_{uid}"))
    return layout, resources


def _clean_one_batch(stack: Stack, *, seed: int, during=None) -> CleanedBatch:
    """Upload a generated sample, let the sensor make its batch, materialize raw_text, then cleaned_shards with its
    checks while `during()` runs in a thread (the fault)."""
    import dagster as dg

    from pipeline_project.cleaning.output.publish import iter_shard_texts, read_shard_manifest
    from pipeline_project.definitions import defs
    from pipeline_project.defs.assets import cleaned
    from pipeline_project.defs.assets.cleaned import cleaned_shards
    from pipeline_project.defs.assets.raw import raw_text
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
    from pipeline_project.demo.sample.corpus import generate

    uid = uuid.uuid4().hex[:8]
    layout, resources = _layout_and_resources(stack, uid)
    s3 = stack.settings().s3_client()
    for f in generate(seed=seed, docs_per_language=2):
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)
    with dg.instance_for_test() as instance:
        sensor_resources = {k: resources[k] for k in ("s3", "layout")}
        with dg.build_sensor_context(instance=instance, resources=sensor_resources, definitions=defs) as ctx:
            batch = raw_s3_sensor(ctx).run_requests[0].partition_key
        instance.add_dynamic_partitions(batches.name, [batch])
        assert dg.materialize([raw_text], resources=resources, partition_key=batch, instance=instance).success
        fault = threading.Thread(target=during, name="fault") if during is not None else None
        if fault is not None:
            fault.start()
        checks = dg.load_asset_checks_from_modules([cleaned])
        result = dg.materialize([cleaned_shards, *checks], resources=resources, partition_key=batch,
                                instance=instance, raise_on_error=False)  # fmt: skip
        if fault is not None:
            fault.join(300)
        events = result.all_events
        mats = [e for e in result.get_asset_materialization_events() if e.asset_key == cleaned_shards.key]
        restarts = sum(1 for e in events if e.event_type_value == "STEP_RESTARTED" and e.step_key == "cleaned_shards")
        failure = next((e.message or "" for e in events if e.is_step_failure), "")
        meta = {k: getattr(v, "value", v) for k, v in mats[-1].materialization.metadata.items()} if mats else {}
    texts: tuple[str, ...] = ()
    if mats:
        manifest = read_shard_manifest(s3, layout.bucket, layout.shard_dir(batch))
        texts = tuple(hashlib.sha256(t.encode()).hexdigest() for t in iter_shard_texts(s3, layout.bucket, manifest))
    return CleanedBatch(
        success=result.success,
        counts={k: meta.get(k) for k in ("documents_in", "kept", "dropped", "quarantined")},
        texts=texts,
        materializations=len(mats),
        step_restarts=restarts,
        checks={e.check_name: e.passed for e in result.get_asset_check_evaluations()},
        failure=failure[:500],
    )


def reference_cleaning(stack: Stack, seed: int) -> CleanedBatch:
    """The same sample cleaned with nothing going wrong (its own prefixes and dedup database)."""
    return _clean_one_batch(stack, seed=seed)


def s3_outage_during_cleaning(
    stack: Stack, reference: CleanedBatch, *, seed: int, kill_after_s: float, outage_s: float
) -> TrialResult:
    """SIGKILL the S3 server `kill_after_s` after cleaned_shards is launched, restart it `outage_s` later."""
    t_start = time.monotonic()
    state: dict[str, Any] = {}

    def outage() -> None:
        time.sleep(kill_after_s)
        sigkill(stack, "s3")
        state["killed_at"] = time.monotonic()
        time.sleep(outage_s)
        state["recovery_s"] = restart(stack, "s3")

    got = _clean_one_batch(stack, seed=seed, during=outage)
    want, have = Counter(reference.texts), Counter(got.texts)
    lost = sum((want - have).values())
    duplicated = sum(c - 1 for c in have.values() if c > 1)
    ok = (
        got.success and got.materializations == 1 and all(got.checks.values()) and bool(got.checks)
        and got.counts == reference.counts and have == want
    )  # fmt: skip
    return TrialResult(
        kind="s3_outage_cleaning", timing_s=kill_after_s, victim=f"s3 down {outage_s:g}s",
        blocks_claimed=reference.counts.get("kept"), blocks_found=len(set(got.texts) & set(reference.texts)),
        lost=lost, duplicated=duplicated, recovery_s=state.get("recovery_s"), ok=ok,
        attempts=1 + got.step_restarts, error=got.failure if not got.success else "",
        seconds=time.monotonic() - t_start,
        detail={"counts": got.counts, "reference_counts": reference.counts, "checks": got.checks,
                "materializations": got.materializations, "step_restarts": got.step_restarts,
                "outage_s": outage_s},
    )  # fmt: skip


# -- MLflow down while the trainer runs -------------------------------------------------------------------------


def mlflow_down_during_training(stack: Stack, workdir: Path, *, when: str, n_blocks: int = 8) -> TrialResult:
    """SIGKILL the MLflow server and its workers while the trainer runs: at its start (`when="start"`, before the
    MLflow run exists) or once its first mid-run checkpoint is in S3 (`when="mid_run"`, the run exists and takes
    metrics). The trainer must finish, checkpoint to S3 and move latest.json; MLflow is restarted afterwards."""
    from pipeline_project.training.checkpoint.store import read_latest
    from pipeline_project_harness.reliability.training_trials import wait_for_checkpoint

    t_start = time.monotonic()
    topic = seed_training_topic(stack, n_blocks)
    batches, positions = reference_batches(stack, topic)
    settings = stack.settings()
    s3, bucket = settings.s3_client(), settings.bucket
    prefix = f"checkpoints/{topic}"
    config = workdir / f"job-{topic}.json"
    config.write_text(json.dumps(trainer_job(stack, topic, prefix, checkpoint_every=2, mlflow=True)))
    with open(workdir / f"trainer-{topic}.log", "w") as err:
        proc = subprocess.Popen(trainer_cmd(config), cwd=REPO, env=trainer_env(stack), stdout=subprocess.PIPE,
                                stderr=err, text=True)  # fmt: skip
        try:
            if when == "mid_run":
                wait_for_checkpoint(s3, bucket, prefix, min_step=2, proc=proc)
            sigkill(stack, "mlflow", tree=True)
            killed_while_running = proc.poll() is None
            stdout, _ = proc.communicate(timeout=600)
        finally:
            proc.kill()
            proc.wait(30)
    recovery_s = restart(stack, "mlflow")
    result = trainer_result(stdout) if proc.returncode == 0 else {}
    latest = read_latest(s3, bucket, prefix).ref
    keys = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])}  # fmt: skip
    folders = sorted({k.split("/")[2] for k in keys if k.split("/")[2].startswith("step-")})
    final = _checkpoint_state(s3, bucket, latest) if latest is not None else {}
    total = len(batches)
    in_s3 = (
        latest is not None
        and {latest.uri.removeprefix(f"s3://{bucket}/") + name for name in ("hf/config.json", "resume/state.pt")}
        <= keys
    )
    checks = {
        "trainer_exit_0": proc.returncode == 0,
        "trained_everything": result.get("steps") == total,
        "mlflow_failure_recorded": bool(result.get("mlflow_error")),
        "latest_points_at_the_final_checkpoint": latest is not None and latest.uri == result.get("checkpoint_uri"),
        "checkpoint_files_in_s3": in_s3,
        "checkpoint_holds_the_end_position": final.get("position") == positions[total] and final.get("step") == total,
        "mid_run_checkpoint_kept": any(f.startswith("step-2-") for f in folders),
    }
    return TrialResult(
        kind="mlflow_down_training", timing_s=0.0, victim=f"mlflow ({when})", blocks_claimed=total * 2,
        blocks_found=(result.get("steps") or 0) * 2, lost=max(0, total - (result.get("steps") or 0)) * 2,
        duplicated=0, recovery_s=recovery_s, ok=all(checks.values()) and killed_while_running, attempts=1,
        error=(result.get("mlflow_error") or "")[:300], seconds=time.monotonic() - t_start,
        detail={"checks": checks, "killed_while_running": killed_while_running, "checkpoints": folders,
                "topic": topic},
    )  # fmt: skip
