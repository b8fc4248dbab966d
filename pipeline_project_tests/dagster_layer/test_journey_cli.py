"""`pipeline-project status` and `checkpoint pull` against the shared stack (S3, Kafka, PostgreSQL: the Dagster
instance and the ledger index), and `--version` from the package metadata."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import uuid

import dagster as dg
from confluent_kafka.admin import NewTopic
from typer.testing import CliRunner

from pipeline_project.cli import context
from pipeline_project.cli.app import app
from pipeline_project.ops import checkpoints
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.training.checkpoint.store import ResumeState, read_latest, save_checkpoint, upload_checkpoint
from pipeline_project.training.presets import build_model
from pipeline_project_tests.dagster_layer.test_failed_batches import _batch
from pipeline_project_tests.training.helpers import SMALL_VOCAB


def test_version_comes_from_the_package_metadata():
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0, out.output
    assert out.output.strip() == f"pipeline-project {importlib.metadata.version('pipeline_project')}"


def _upload_steps(stack, tmp_path, prefix: str, topic: str, steps=(1, 2)) -> dict[int, str]:
    """A tiny checkpoint per step (each saving position offset 2 of partition 0); {step: sha256 of its weights}."""
    s3, pointer, digests = stack.s3_client(), None, {}
    model = build_model("tiny", SMALL_VOCAB)
    for step in steps:
        states = [{"topic": topic, "partitions": {"0": {"offset": 2, "block": 0}}}]
        local = save_checkpoint(tmp_path / f"step-{step}", model=model, tokenizer=None,
                                resume=ResumeState(step=step, tokens_seen=64, optimizer={}, data_states=states))  # fmt: skip
        digests[step] = hashlib.sha256((local / "hf" / "model.safetensors").read_bytes()).hexdigest()
        pointer = upload_checkpoint(
            s3, stack.bucket, prefix, step, local, expected=pointer or read_latest(s3, stack.bucket, prefix)
        )
        model.model.embed_tokens.weight.data += 1  # each step's weights differ
    return digests


def _failing_job():
    @dg.op
    def clean():
        raise RuntimeError("SlowDown: throttled past its retries")

    @dg.job(name="ingest_batch")
    def ingest_batch():
        clean()

    return ingest_batch


def test_status_shows_pending_running_failed_batches_lag_and_newest_checkpoints(
    stack, pg_instance, resources, layout, s3, tmp_path, monkeypatch
):
    instance = pg_instance
    failed = _batch(instance, resources, s3, layout, ["a.txt", "b.txt"])
    result = _failing_job().execute_in_process(
        instance=instance, tags={"dagster/partition": failed}, raise_on_error=False
    )
    assert not result.success
    pending, running = f"pending-{uuid.uuid4().hex[:6]}", f"running-{uuid.uuid4().hex[:6]}"
    instance.add_dynamic_partitions("batches", [pending, running])
    instance.add_run(dg.DagsterRun(job_name="ingest_batch", run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.STARTED,
                                   tags={"dagster/partition": running}))  # fmt: skip

    kafka = KafkaSettings.from_settings(stack)
    admin = kafka.make_admin()  # held until the future completes
    admin.create_topics([NewTopic(layout.topic.name, 2, 1)])[layout.topic.name].result(30)
    producer = kafka.make_producer()
    for partition, count in ((0, 5), (1, 2)):
        for _ in range(count):
            producer.produce(layout.topic.name, value=b"x" * 8, partition=partition)
    assert producer.flush(30) == 0
    lineage = f"status-{uuid.uuid4().hex[:6]}"
    _upload_steps(stack, tmp_path, f"{layout.checkpoints_prefix}{lineage}", layout.topic.name)
    s3.put_object(Bucket=stack.bucket, Key=f"{layout.checkpoints_prefix}broken/latest.json", Body=b"{not json")

    monkeypatch.setenv("PIPELINE_TOPIC", layout.topic.name)
    monkeypatch.setattr(context, "dagster_instance", lambda home: instance)
    monkeypatch.setattr(instance, "__exit__", lambda *a: None)
    monkeypatch.setattr(checkpoints, "defaults", lambda: (layout.checkpoints_prefix, lineage))
    out = CliRunner().invoke(app, ["status", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)

    batches = report["batches"]
    assert batches["counts"] == {"failed": 1, "pending": 1, "running": 1}, batches
    [row] = batches["failed"]
    assert (row["batch"], row["step"]) == (failed, "clean") and "SlowDown" in row["error"]
    assert sorted(row["objects"]) == [layout.raw_prefix + "a.txt", layout.raw_prefix + "b.txt"]
    assert [r["batch"] for r in batches["pending"]] == [pending] and batches["pending"][0]["status"] == "not started"
    assert [r["batch"] for r in batches["running"]] == [running]
    assert all(
        r["ledger"] == {"state": "absent", "blocks": 0} for s in ("failed", "pending", "running") for r in batches[s]
    )
    assert report["topic"]["partitions"] == {"0": {"earliest": 0, "end": 5}, "1": {"earliest": 0, "end": 2}}
    heads = {r["lineage"]: r for r in report["checkpoints"]["lineages"]}
    assert report["checkpoints"]["lineages"][0]["lineage"] == lineage  # the trainer's lineage first
    assert (
        heads[lineage]["step"] == 2 and heads[lineage]["lag"] == {"0": 3, "1": 2} and heads[lineage]["lag_total"] == 5
    )
    assert heads["broken"]["step"] is None and "not JSON" in heads["broken"]["error"]
    assert any(s.startswith("FAIL kafka.topic:") for s in report["services"])  # 2 partitions, RF 1: the doctor says so

    human = CliRunner().invoke(app, ["status"]).output
    assert f"failed   {failed}" in human and f"s3://{stack.bucket}/{layout.raw_prefix}a.txt" in human
    assert f"{lineage}  step 2" in human and f"lag 5 offsets on {layout.topic.name}" in human


def test_checkpoint_pull_newest_or_a_step_and_one_line_errors(stack, layout, s3, tmp_path, monkeypatch):
    lineage = f"pull-{uuid.uuid4().hex[:6]}"
    prefix = f"{layout.checkpoints_prefix}{lineage}"
    digests = _upload_steps(stack, tmp_path, prefix, layout.topic.name)
    monkeypatch.setattr(checkpoints, "defaults", lambda: (layout.checkpoints_prefix, "deepseek"))
    runner = CliRunner()

    def weights(directory):
        return hashlib.sha256((directory / "hf" / "model.safetensors").read_bytes()).hexdigest()

    newest = runner.invoke(app, ["checkpoint", "pull", "--lineage", lineage, str(tmp_path / "newest")])
    assert newest.exit_code == 0, newest.output
    assert f"pulled step 2 of {lineage}" in newest.output and weights(tmp_path / "newest") == digests[2]
    assert json.loads((tmp_path / "newest" / "resume" / "data_state.json").read_text())["step"] == 2
    older = runner.invoke(app, ["checkpoint", "pull", "--lineage", lineage, "--step", "1", str(tmp_path / "one")])
    assert older.exit_code == 0, older.output
    assert weights(tmp_path / "one") == digests[1]

    s3.put_object(Bucket=stack.bucket, Key=f"{prefix}/step-3-0badf00d/hf/config.json", Body=b"{}")  # a crashed upload
    for args, message in (
        (["--lineage", lineage, "--step", "9"], f"error: lineage '{lineage}' at s3://{stack.bucket}/{prefix}/ has no step 9 (steps: 1, 2, 3)"),
        (["--lineage", "nosuch"], "error: no checkpoint lineage 'nosuch' at "),
        ([], "error: no checkpoint lineage 'deepseek' at "),  # the default lineage
        (["--lineage", lineage, "--step", "3"], "is incomplete"),
    ):  # fmt: skip
        target = tmp_path / f"failed-{len(args)}-{args[-1] if args else ''}"
        out = runner.invoke(app, ["checkpoint", "pull", *args, str(target)])
        assert out.exit_code == 1 and message in out.output and len(out.output.strip().splitlines()) == 1, out.output
        assert not target.exists() or not any(target.iterdir())
    taken = runner.invoke(app, ["checkpoint", "pull", "--lineage", lineage, str(tmp_path / "newest")])
    assert taken.exit_code == 1 and "exists and is not an empty directory" in taken.output
