"""The trainer on a controlled mixture, against the real stack: two domains produced with `domain` headers,
trained at set proportions, the mixture state in the checkpoint, new proportions on resume, MLflow metrics."""

from __future__ import annotations

import hashlib
import uuid

import pytest
import torch
from mlflow.tracking import MlflowClient

from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.training.checkpoint.store import load_latest, s3_client
from pipeline_project_tests.training.test_entrypoint_integration import CORPUS, _run_trainer

pytestmark = pytest.mark.stack

SEQ_LEN, BATCH = 32, 4


def test_trainer_draws_the_mixture_keeps_it_in_the_checkpoint_and_takes_new_proportions(
    stack, tmp_path, deepseek_tokenizer
):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = f"test-mixture-train-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3)
    en = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")
    docs = [("en_web", en[i : i + 400]) for i in range(0, 6000, 400)]
    docs += [("code", f"def f{i}(x):\n    return x * {i} + {i * i}\n" * 6) for i in range(15)]
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key="b1",
            content_hash=hashlib.sha256(repr(docs).encode()).hexdigest(),
            source="b1",
            seq_len=SEQ_LEN,
            tokenizer=deepseek_tokenizer,
        ),
        docs,
    )
    assert set(report.domains) == {"en_web", "code"}

    prefix = f"checkpoints/test-{topic}"
    job = {
        "train": {"preset": {"name": "tiny"}, "batch_size": BATCH, "device": "cpu", "max_steps": 3,
                  "mixture": {"proportions": {"en_web": 0.75, "code": 0.25}}},
        "kafka": kafka.model_dump(mode="json"), "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint, "bucket": stack.bucket, "checkpoint_prefix": prefix,
        "mlflow_tracking_uri": stack.mlflow_tracking_uri, "experiment_name": "test-training-mixture",
        "mlflow_run_name": f"{topic}-first", "loader_idle_timeout_s": 5, "log_model_to_mlflow": False,
    }  # fmt: skip
    first = _run_trainer(job, tmp_path)
    assert first["status"] == "trained" and first["steps"] == 3
    client = MlflowClient(stack.mlflow_tracking_uri)
    run = client.get_run(first["mlflow_run_id"])
    assert run.data.metrics["mixture/share/en_web"] == 0.75 and run.data.metrics["mixture/share/code"] == 0.25
    assert run.data.metrics["mixture/target/code"] == 0.25
    assert [m.step for m in client.get_metric_history(run.info.run_id, "mixture/realized/code")] == [1, 2, 3]
    assert run.data.params["train.mixture.proportions.code"] == "0.25"

    loaded = load_latest(s3_client(stack), stack.bucket, prefix, tmp_path / "ckpt")
    (state,) = loaded.resume.data_states
    mixture = state["mixture"]
    assert mixture["rank"]["delivered"] == {"code": 3, "en_web": 9}
    assert set(mixture["domains"]) == {"en_web", "code"}

    job["train"]["mixture"] = {"proportions": {"en_web": 0.5, "code": 0.5}, "on_domain_exhausted": "wait"}
    job.update(mlflow_run_name=f"{topic}-second")
    job["train"]["max_steps"] = None
    second = _run_trainer(job, tmp_path)  # runs until a domain is dry (wait: the invocation ends there)
    assert second["status"] == "trained" and second["resumed_from"] == first["checkpoint_uri"]
    run2 = client.get_run(second["mlflow_run_id"])
    assert run2.data.metrics["mixture/share/code"] == 0.5
    dry = [k.removeprefix("mixture/exhausted/") for k in run2.data.metrics if k.startswith("mixture/exhausted/")]
    assert len(dry) == 1 and run2.data.tags[f"mixture.exhausted.{dry[0]}"] == "wait"
    first_run = {"code": 3, "en_web": 9}[dry[0]]
    trained = first_run + second["steps"] * BATCH // 2
    blocks = report.domains[dry[0]]["blocks"]
    assert blocks - BATCH < trained <= blocks  # every block of the dry domain once, up to the unfinished batch
    assert torch.isfinite(torch.tensor(second["final_loss"]))
