"""After `checkpoint rewind --step N` the trigger counts from step N (what latest.json names), so the batches the
rewound steps had trained are untrained again (issue 40, section 2). Stand-in S3, no services."""

import json
import uuid

import dagster as dg

from pipeline_project.defs.assets.checkpoint import untrained_topic_batches
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.defs.resources.trigger import TrainingTrigger
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor, trigger_lineage
from pipeline_project.training.checkpoint.rewind import rewind
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client, MemoryS3Resource

TOPIC = "token-blocks"


def _saved(client, layout: PipelineLayout, lineage: str, step: int, offset: int) -> str:
    """A whole checkpoint of `lineage` at `step` whose loaders stand at `offset` of partition 0; latest.json names it."""
    prefix = f"{layout.checkpoints_prefix}{lineage}"
    folder = f"{prefix}/step-{step}-{uuid.uuid4().hex[:8]}"
    state = {"step": step, "data_states": [{"topic": TOPIC, "partitions": {"0": {"offset": offset, "block": 0}}}]}
    for name, body in (("hf/config.json", b"{}"), ("resume/state.pt", b"x"), ("resume/data_state.json", state)):
        client.put_object(Bucket=layout.bucket, Key=f"{folder}/{name}", Body=json.dumps(body).encode() if isinstance(body, dict) else body)  # fmt: skip
    uri = f"s3://{layout.bucket}/{folder}/"
    ref = {"step": step, "uri": uri, "hf_uri": f"{uri}hf/", "resume_uri": f"{uri}resume/", "created_at": str(step)}
    client.put_object(Bucket=layout.bucket, Key=f"{prefix}/latest.json", Body=json.dumps(ref).encode())
    return uri


class _Listing:
    """One page of a listing with its delimiter (the stand-in's paginator drops it): what `rewind` lists."""

    def __init__(self, client: MemoryS3Client):
        self.client = client

    def paginate(self, **kwargs):
        yield self.client.list_objects_v2(**kwargs)


def _tick(instance, trigger, cursor=None):
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"trigger": trigger, "trainer": TrainerResource()}
    ) as ctx:
        return checkpoint_trigger_sensor(ctx)


def test_a_rewind_makes_the_batches_trained_after_its_step_untrained_again():
    s3, layout, lineage = MemoryS3Resource(store=uuid.uuid4().hex), PipelineLayout(), TrainerResource().run_name
    client = s3.get_client()
    trigger = TrainingTrigger(min_new_tokens=150, max_steps=0, s3=s3, layout=layout)
    with dg.instance_for_test() as instance:
        for i in range(4):  # b0..b3, 100 tokens each, offsets 10 i .. 10 i + 9 of partition 0
            meta = {"tokens": 100, "offset_ranges": {"0": [10 * i, 10 * i + 9]}, "topic": TOPIC}
            instance.report_runless_asset_event(
                dg.AssetMaterialization("token_blocks", partition=f"b{i}", metadata=meta)
            )
        _saved(client, layout, lineage, 100, 20)  # step 100 had trained b0, b1
        newest = _saved(client, layout, lineage, 200, 40)  # step 200 trained all four: the newest materialization
        position = {"0": {"offset": 40, "block": 0}}
        meta = {"end_position": dg.MetadataValue.json(position), "steps": 100, "checkpoint_uri": newest, "topic": TOPIC}
        instance.report_runless_asset_event(dg.AssetMaterialization("deepseek_checkpoint", metadata=meta))
        before = _tick(instance, trigger)
        assert "0 untrained tokens" in before.skip_reason.skip_message

        client.get_paginator = lambda _name: _Listing(client)
        rewind(client, layout.bucket, layout.checkpoints_prefix, lineage, 100, reason="bad batch b2", operator="test")

        after = _tick(instance, trigger, before.cursor)
        (request,) = after.run_requests  # b2 and b3 are untrained again: 200 tokens >= 150
        assert request.run_key != _tick(instance, TrainingTrigger(min_new_tokens=0)).run_requests[0].run_key
        assert untrained_topic_batches(instance, TOPIC, lineage=trigger_lineage(trigger, lineage)) == {
            "b2": {"0": [20, 29]},
            "b3": {"0": [30, 39]},
        }
