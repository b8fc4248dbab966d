"""`checkpoint rewind` on the real stack: a lineage trained to step 4 is rewound to step 2, the next invocation
continues exactly from step 2's checkpoint and data position, step 4's checkpoint is kept and marked, and MLflow's
`latest-checkpoint` alias names step 2's model version again."""

from __future__ import annotations

import json
import uuid

import pytest
from mlflow.tracking import MlflowClient

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.ops.checkpoints import rewind as ops_rewind
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.training.checkpoint.ref import read_latest
from pipeline_project.training.checkpoint.rewind import MARKER_FILE, rewind
from pipeline_project.training.checkpoint.store import s3_client
from pipeline_project.training.errors import CheckpointNotFoundError
from pipeline_project.training.tracking.lineage import CHECKPOINT_ALIAS
from pipeline_project_tests.training.test_entrypoint_integration import CORPUS, SEQ_LEN, _produce, _run_trainer

pytestmark = pytest.mark.stack


def test_a_rewound_lineage_continues_from_the_step_it_was_rewound_to(stack, tmp_path, deepseek_tokenizer):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = f"test-rewind-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=1, replication_factor=3)
    text = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")
    _produce(kafka, topic, "b1", [text[i : i + 400] for i in range(0, 4000, 400)], deepseek_tokenizer)
    root, lineage = "checkpoints", f"test-{topic}"
    job = {
        "train": {"preset": {"name": "tiny"}, "warmup_steps": 2, "batch_size": 2, "device": "cpu", "max_steps": 2},
        "kafka": kafka.model_dump(mode="json"),
        "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint,
        "bucket": stack.bucket,
        "checkpoint_prefix": f"{root}/{lineage}",
        "partitions": ["b1"],
        "loader_idle_timeout_s": 5,
        "mlflow_tracking_uri": stack.mlflow_tracking_uri,
        "experiment_name": "test-training",
        "registered_model_name": lineage,
        "log_model_to_mlflow": False,
    }
    first, second = _run_trainer(job, tmp_path), _run_trainer(job, tmp_path)
    assert (first["end_step"], second["end_step"]) == (2, 4)
    s3 = s3_client(stack)

    with pytest.raises(ValueError, match="a rewind goes back"):
        rewind(s3, stack.bucket, root, lineage, 4, reason="r", operator="test")
    with pytest.raises(CheckpointNotFoundError, match="has no step 3"):
        rewind(s3, stack.bucket, root, lineage, 3, reason="r", operator="test")

    done, alias = ops_rewind(stack, lineage, 2, "bad data after step 2")
    assert done.to.uri == first["checkpoint_uri"] and done.marked == [second["checkpoint_uri"]]
    assert alias == f"version {first['model_version']}" and first["model_version"] != second["model_version"]
    client = MlflowClient(stack.mlflow_tracking_uri)
    assert client.get_model_version_by_alias(lineage, CHECKPOINT_ALIAS).version == first["model_version"]
    assert read_latest(s3, stack.bucket, f"{root}/{lineage}").ref.uri == first["checkpoint_uri"]
    marker_key = f"{key_in_bucket(second['checkpoint_uri'], stack.bucket)}{MARKER_FILE}"
    marker = json.loads(s3.get_object(Bucket=stack.bucket, Key=marker_key)["Body"].read())
    assert marker["reason"] == "bad data after step 2" and marker["rewound_to"]["step"] == 2

    third = _run_trainer(job, tmp_path)
    assert third["resumed_from"] == first["checkpoint_uri"] and third["start_step"] == 2
    assert third["start_position"] == first["end_position"]  # the very blocks after step 2, again
    assert third["end_step"] == 4 and third["checkpoint_uri"] not in (first["checkpoint_uri"], second["checkpoint_uri"])
