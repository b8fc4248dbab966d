"""Takedown requests in the UI: the sensor turns each stored report into a partition of `takedown_report` and a
materialization with the request's figures, once per version of the report."""

from __future__ import annotations

import json
import uuid

import dagster as dg

from pipeline_project.defs.assets.takedowns import TAKEDOWN_REPORT, TAKEDOWNS_PREFIX, takedown_report_sensor
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.ops.takedown.report import PREFIX, report_key
from pipeline_project_tests.dagster_layer.standins import MemoryS3Resource


def _report(request_id: str, lineages: list[dict]) -> bytes:
    return json.dumps(
        {
            "request": {"request_id": request_id, "reason": "erasure", "target_kind": "text", "target": "t.txt"},
            "copies": [{"state": "kept"}, {"state": "dropped"}],
            "blocks": 7,
            "retraction": f"takedown:{request_id}",
            "blocklist_added": 3,
            "unproduced_batches": [],
            "exposures": [{}] * 4,
            "lineages": lineages,
            "first_checkpoint": lineages[0]["first_checkpoint"] if lineages else None,
            "tagged_versions": ["lin/1"] if lineages else [],
        }
    ).encode()


def test_each_stored_report_becomes_a_request_partition_and_a_materialization():
    assert PREFIX == TAKEDOWNS_PREFIX  # where the command writes is where the sensor reads
    s3 = MemoryS3Resource(store=f"takedowns-{uuid.uuid4().hex}")
    layout = PipelineLayout(bucket="pipeline")
    client = s3.get_client()
    exposed = [{"lineage": "lin", "first_checkpoint": "s3://b/ck/step-4", "first_step": 3, "steps": 2,
                "ranks": [0, 1], "tokens": 900}]  # fmt: skip
    client.put_object(Bucket="pipeline", Key=report_key("gdpr-1"), Body=_report("gdpr-1", exposed))
    client.put_object(Bucket="pipeline", Key=report_key("optout-2"), Body=_report("optout-2", []))
    client.put_object(Bucket="pipeline", Key="takedowns/optout-2/request.json", Body=b"{}")

    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources={"s3": s3, "layout": layout})
        result = takedown_report_sensor(context)
        assert [e.partition for e in result.asset_events] == ["gdpr-1", "optout-2"]
        assert all(e.asset_key == TAKEDOWN_REPORT for e in result.asset_events)
        first = result.asset_events[0].metadata
        assert first["state"].value == "exposed" and first["blocks"].value == 7 and first["kept_copies"].value == 1
        assert "s3://b/ck/step-4" in first["lineages"].value and first["tagged_versions"].value == "lin/1"
        assert result.asset_events[1].metadata["state"].value == "not trained on"
        assert result.dynamic_partitions_requests[0].partition_keys == ["gdpr-1", "optout-2"]

        again = dg.build_sensor_context(instance=instance, cursor=result.cursor, resources={"s3": s3, "layout": layout})
        assert takedown_report_sensor(again).asset_events == []  # nothing new
        client.put_object(Bucket="pipeline", Key=report_key("gdpr-1"), Body=_report("gdpr-1", []))  # run again
        rerun = takedown_report_sensor(
            dg.build_sensor_context(instance=instance, cursor=result.cursor, resources={"s3": s3, "layout": layout})
        )
        assert [e.partition for e in rerun.asset_events] == ["gdpr-1"]
