"""A sharded (FSDP2) training invocation against the real stack: two gloo ranks train from the topic, every rank
uploads its DCP shard into the one step folder, `hf/` and MLflow's `models:/<lineage>@latest-checkpoint` hold the
whole model, and one unsharded process continues the lineage exactly where the two ranks stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.training.checkpoint.store import download_prefix, latest_ref, s3_client
from pipeline_project.training.entrypoint import RESULT_PREFIX
from pipeline_project.training.tracking.lineage import CHECKPOINT_ALIAS
from pipeline_project_tests.training.test_entrypoint_integration import CORPUS, SEQ_LEN, _produce

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
BATCH = 2


def _train(job: dict, workdir: Path, ranks: int) -> dict:
    config = workdir / f"job-{uuid.uuid4().hex[:6]}.json"
    config.write_text(json.dumps(job))
    entry = ["-m", "pipeline_project.training.entrypoint", "--config", str(config)]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, *launcher, *entry], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    [line] = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    return json.loads(line[len(RESULT_PREFIX) :])


def test_a_sharded_lineage_checkpoints_every_shard_exports_whole_and_resumes_on_one_rank(
    stack, tmp_path, deepseek_tokenizer, monkeypatch
):
    import mlflow

    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = f"test-fsdp-{uuid.uuid4().hex[:8]}"
    # one partition of four messages (one per batch): the two ranks stripe it by message, two each
    ensure_topic(kafka.make_admin(), topic, partitions=1, replication_factor=3)
    text = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")
    batches = [f"batch-{b}" for b in range(4)]
    for b, key in enumerate(batches):
        _produce(
            kafka, topic, key, [text[i : i + 400] for i in range(b * 1600, (b + 1) * 1600, 400)], deepseek_tokenizer
        )
    prefix = f"checkpoints/test-{topic}"
    job = {
        "train": {"preset": {"name": "tiny"}, "warmup_steps": 2, "batch_size": BATCH, "device": "cpu",
                  "parallelism": "fsdp"},
        "kafka": kafka.model_dump(mode="json"),
        "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint,
        "bucket": stack.bucket,
        "checkpoint_prefix": prefix,
        "mlflow_tracking_uri": stack.mlflow_tracking_uri,
        "experiment_name": "test-training",
        "dagster_run_id": "dagster-run-1",
        "partitions": batches,
        "loader_idle_timeout_s": 5,
        "log_model_to_mlflow": True,
        "registered_model_name": f"test-{topic}",
    }  # fmt: skip

    first = _train(job, tmp_path, ranks=2)
    assert (first["status"], first["world_size"]) == ("trained", 2) and first["steps"] >= 2
    s3 = s3_client(stack)
    ref = latest_ref(s3, stack.bucket, prefix)
    assert ref.uri == first["checkpoint_uri"]
    local = download_prefix(s3, stack.bucket, key_in_bucket(ref.uri, stack.bucket), tmp_path / "ckpt")
    shards = sorted(p.name for p in (local / "resume" / "dcp").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # each rank's shard, in the one step folder
    exported = AutoModelForCausalLM.from_pretrained(local / "hf").eval()  # whole, not rank 0's shard
    assert exported.model.embed_tokens.weight.shape[0] >= deepseek_tokenizer.vocab_size

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", stack.s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", stack.s3_access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", stack.s3_secret_key)
    mlflow.set_tracking_uri(stack.mlflow_tracking_uri)  # unset, MLflow 3 makes ./mlflow.db
    mlflow.set_registry_uri(stack.mlflow_tracking_uri)
    (tmp_path / "dl").mkdir()
    assert first["registered_model"] == f"test-{topic}"
    uri = f"models:/{first['registered_model']}@{CHECKPOINT_ALIAS}"
    pipe = mlflow.transformers.load_model(uri, dst_path=str(tmp_path / "dl"))
    ids = torch.tensor([deepseek_tokenizer.tokenizer.encode("The data pipeline")])
    with torch.no_grad():
        torch.testing.assert_close(pipe.model.eval()(ids).logits, exported(ids).logits)
    assert first["mlflow_model_uri"]  # the run's logged model: the gathered weights, not a shard

    _produce(kafka, topic, "batch-4", [text[i : i + 400] for i in range(8000, 11000, 400)], deepseek_tokenizer)
    job.update(dagster_run_id="dagster-run-2", partitions=[*batches, "batch-4"], log_model_to_mlflow=False)
    second = _train(job, tmp_path, ranks=1)  # another world size, unsharded: DCP reshards on load
    assert second["status"] == "trained" and second["resumed_from"] == first["checkpoint_uri"]
    assert second["start_step"] == first["end_step"] and second["start_position"] == first["end_position"]
    assert latest_ref(s3, stack.bucket, prefix).uri == second["checkpoint_uri"]
