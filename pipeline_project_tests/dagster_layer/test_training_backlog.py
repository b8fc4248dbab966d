"""The real `deepseek_checkpoint` launch path with 10^5 untrained batches: the trainer starts.

Inline, the job of that many batches is a ~30 MB environment variable and the trainer process cannot start
("Argument list too long"); by reference it is a few KB, and rank 0 reads the backlog back from S3."""

import dagster as dg
import pytest

import pipeline_project.defs.assets.checkpoint as checkpoint_module
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.training.backlog import read_backlog

pytestmark = pytest.mark.stack

BATCHES = 100_000


def test_a_training_launch_with_a_hundred_thousand_untrained_batches_starts(
    instance, resources, layout, s3, uid, monkeypatch
):
    backlog = {f"b20261207T120000-{i:010x}": {str(i % 8): [i, i + 40]} for i in range(BATCHES)}
    monkeypatch.setattr(checkpoint_module, "untrained_topic_batches", lambda _instance, _topic, *_store: backlog)
    ensure_topic(resources["kafka"].admin(), layout.topic.name, replication_factor=1, min_insync_replicas=1)
    resources["trainer"] = TrainerResource(run_name=f"it-{uid}", batch_size=4, max_steps=1)
    result = dg.materialize(
        [checkpoint_module.deepseek_checkpoint], resources=resources, instance=instance, raise_on_error=False
    )
    failure = next((e.message for e in result.all_events if e.is_step_failure), "")
    assert result.success, failure[-2000:]
    meta = {
        k: getattr(v, "value", v)
        for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()
    }
    assert meta["status"] == "nothing_new"  # an empty topic: the trainer started, read its job and ended cleanly
    assert meta["backlog_batches"] == BATCHES  # ... and rank 0 read every batch back
    run_id = result.run_id
    stored = read_backlog(
        s3, f"s3://{layout.bucket}/{layout.checkpoints_prefix}it-{uid}/jobs/{run_id}/backlog.json.zst"
    )
    assert len(stored.partitions) == BATCHES and stored.batch_offsets == backlog
