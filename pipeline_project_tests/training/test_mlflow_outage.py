"""An MLflow outage never loses a checkpoint: the trainer, pointed at a closed port, trains, checkpoints mid-run
and at the end, moves latest.json, exits 0 and says what MLflow did not get."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.training.checkpoint.store import latest_ref, s3_client
from pipeline_project.training.entrypoint import RESULT_PREFIX

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
SEQ_LEN, BATCH = 32, 2


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def test_training_checkpoints_and_succeeds_while_mlflow_is_down(stack, tmp_path, deepseek_tokenizer):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = f"test-mlflow-down-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3)
    text = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")
    docs = [text[0:450], text[450:900]]
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key="b1",
            content_hash=hashlib.sha256("".join(docs).encode()).hexdigest(),
            source="b1",
            seq_len=SEQ_LEN,
            tokenizer=deepseek_tokenizer,
        ),
        docs,
    )
    assert report.blocks >= 3 * BATCH

    prefix = f"checkpoints/test-{topic}"
    job = {
        "train": {"preset": {"name": "tiny"}, "batch_size": BATCH, "device": "cpu", "checkpoint_every": 2},
        "kafka": kafka.model_dump(mode="json"),
        "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint,
        "bucket": stack.bucket,
        "checkpoint_prefix": prefix,
        "mlflow_tracking_uri": f"http://127.0.0.1:{_closed_port()}",
        "dagster_run_id": "dagster-run-mlflow-down",
        "loader_idle_timeout_s": 5,
    }
    config = tmp_path / "job.json"
    config.write_text(json.dumps(job))
    # one quick attempt per MLflow call (the client's default retries for minutes before it gives up)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    env["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "5"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline_project.training.entrypoint", "--config", str(config)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    result = json.loads(line[len(RESULT_PREFIX) :])

    assert result["status"] == "trained" and result["steps"] == report.blocks // BATCH
    assert result["mlflow_error"] and result["mlflow_run_id"] is None and result["mlflow_model_uri"] is None
    assert result["dead_letters"] == 0
    s3 = s3_client(stack)
    latest = latest_ref(s3, stack.bucket, prefix)
    assert latest.uri == result["checkpoint_uri"] and latest.step == result["end_step"]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=stack.bucket, Prefix=prefix)["Contents"]]
    steps = sorted({int(k.split("/")[2].split("-")[1]) for k in keys if k.split("/")[2].startswith("step-")})
    # mid-run every 2 steps, and the end (once, when the last mid-run checkpoint is not the end already)
    expected = sorted({*range(2, result["steps"] + 1, 2), result["steps"]})
    assert steps == expected
    assert any(k.startswith(latest.uri.removeprefix(f"s3://{stack.bucket}/")) for k in keys)
