"""The out-of-process trainer against the real stack: Kafka topic -> train -> S3 checkpoint + MLflow run."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.training.checkpoint.store import latest_ref, s3_client
from pipeline_project.training.entrypoint import RESULT_PREFIX

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
SEQ_LEN, BATCH = 32, 2


def _produce(kafka: KafkaSettings, topic: str, key: str, docs: list[str], tokenizer) -> int:
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key=key,
            content_hash=hashlib.sha256("".join(docs).encode()).hexdigest(),
            source=key,
            seq_len=SEQ_LEN,
            tokenizer=tokenizer,
        ),
        docs,
    )
    return report.blocks


def _run_trainer(job: dict, workdir: Path) -> dict:
    config = workdir / f"job-{uuid.uuid4().hex[:6]}.json"
    config.write_text(json.dumps(job))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline_project.training.entrypoint", "--config", str(config)],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert len(lines) == 1, proc.stdout[-2000:]
    return json.loads(lines[0][len(RESULT_PREFIX) :])


def test_train_resume_and_nothing_new(stack, tmp_path, deepseek_tokenizer):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = f"test-train-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=4, replication_factor=3)
    text = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")
    first_blocks = _produce(
        kafka, topic, "batch-1", [text[i : i + 400] for i in range(0, 4000, 400)], deepseek_tokenizer
    )
    assert first_blocks >= 2 * BATCH

    prefix = f"checkpoints/test-{topic}"
    job = {
        "train": {"preset": {"name": "tiny"}, "lr": 3e-3, "warmup_steps": 2, "batch_size": BATCH, "device": "cpu"},
        "kafka": kafka.model_dump(mode="json"),
        "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint,
        "bucket": stack.bucket,
        "checkpoint_prefix": prefix,
        "mlflow_tracking_uri": stack.mlflow_tracking_uri,
        "experiment_name": "test-training",
        "mlflow_run_name": f"{topic}-first",
        "dagster_run_id": "dagster-run-1",
        "partitions": ["batch-1"],
        "loader_idle_timeout_s": 5,
        "system_metrics_interval_s": 1,
        "log_model_to_mlflow": True,
    }

    first = _run_trainer(job, tmp_path)
    assert first["status"] == "trained" and first["resumed_from"] is None
    assert first["steps"] == first_blocks // BATCH and first["tokens"] == first["steps"] * BATCH * SEQ_LEN
    assert first["offsets_consumed"] and first["final_loss"] is not None
    s3 = s3_client(stack)
    assert latest_ref(s3, stack.bucket, prefix).uri == first["checkpoint_uri"]

    client = MlflowClient(stack.mlflow_tracking_uri)
    run = client.get_run(first["mlflow_run_id"])
    assert first["mlflow_run_url"].endswith(f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}")
    assert run.info.status == "FINISHED"
    assert run.data.tags["dagster_run_id"] == "dagster-run-1" and run.data.tags["data_partitions"] == "batch-1"
    assert run.data.params["train.batch_size"] == str(BATCH) and run.data.params["model.hidden_size"] == "64"
    assert len(run.data.params["tokenizer.hash"]) == 64
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in losses] == list(range(1, first["steps"] + 1))
    assert {"lr", "tokens_per_s", "data_wait_fraction", "consumer_lag", "expert_load/layer1/max_violation"} <= set(
        run.data.metrics
    )
    assert not any(k.startswith("expert_load/layer1/e") for k in run.data.metrics)  # per-expert: the table
    with open(client.download_artifacts(run.info.run_id, "expert_load.json", str(tmp_path))) as f:
        table = json.load(f)
    assert table["columns"] == ["step", "router", "expert", "load"] and table["data"][0][1] == "layer1"
    assert any(k.startswith("system/") for k in run.data.metrics)
    assert [o.model_id for o in run.outputs.model_outputs] == [first["mlflow_model_uri"].removeprefix("models:/")]

    job.update(log_model_to_mlflow=False, mlflow_run_name=f"{topic}-again", dagster_run_id="dagster-run-2")
    again = _run_trainer(job, tmp_path)
    assert again["status"] == "nothing_new" and again["steps"] == 0 and again["checkpoint_uri"] is None
    assert again["mlflow_run_id"] is None and again["end_position"] == first["end_position"]
    assert latest_ref(s3, stack.bucket, prefix).uri == first["checkpoint_uri"]

    leftover = first_blocks % BATCH  # the short last batch stays unconsumed for the next invocation
    new_blocks = _produce(
        kafka, topic, "batch-2", [text[i : i + 400] for i in range(8000, 11000, 400)], deepseek_tokenizer
    )
    job.update(mlflow_run_name=f"{topic}-third", dagster_run_id="dagster-run-3", partitions=["batch-1", "batch-2"])
    third = _run_trainer(job, tmp_path)
    assert third["status"] == "trained" and third["resumed_from"] == first["checkpoint_uri"]
    assert third["start_step"] == first["end_step"]
    assert third["steps"] == (leftover + new_blocks) // BATCH  # only the new blocks, each once
    assert third["start_position"] == first["end_position"]
    assert latest_ref(s3, stack.bucket, prefix).uri == third["checkpoint_uri"]
