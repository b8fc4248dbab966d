"""Takedown requests in the UI: the external asset `takedown_report`, one partition per request, materialized by
`takedown_report_sensor` from the reports `pipeline-project takedown` stores under `takedowns/<request>/` in S3
(`ops.takedown.report`), so a request made from a laptop or a pod shows up with its state and figures without
Dagster in the path of the takedown itself. A request run again (its report rewritten) is materialized again."""

from __future__ import annotations

import json

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.resources.layout import PipelineLayout

# where `ops.takedown.report` stores each request's request.json and report.json (ops sits above this floor)
TAKEDOWNS_PREFIX = "takedowns/"
takedown_requests = dg.DynamicPartitionsDefinition(name="takedown_requests")
TAKEDOWN_REPORT = dg.AssetKey("takedown_report")

takedown_report = dg.AssetSpec(
    TAKEDOWN_REPORT,
    partitions_def=takedown_requests,
    group_name="governance",
    code_version="1",
    description="One partition per takedown request (`pipeline-project takedown`): the copies found, the blocks "
    "retracted, the blocklist entries and the exposure report (which lineages, checkpoints, steps and ranks "
    "trained on the request's blocks). Materialized from the report in S3 by `takedown_report_sensor`.",
)


def report_metadata(report: dict, uri: str) -> dict:
    """What the UI shows of one stored report (`ops.takedown.report.ExposureReport` as JSON)."""
    request = report.get("request", {})
    lineages = report.get("lineages", [])
    rows = "\n".join(
        f"| {r['lineage']} | {r['first_checkpoint']} | {r['first_step']} | {r['steps']} | {r['ranks']} | {r['tokens']} |"
        for r in lineages
    )
    table = "| lineage | first checkpoint | first step | steps | ranks | tokens |\n|---|---|---|---|---|---|\n" + rows
    kept = sum(1 for c in report.get("copies", []) if c.get("state") == "kept")
    return {
        "reason": request.get("reason", ""),
        "target": f"{request.get('target_kind', '')}: {request.get('target', '')}",
        "state": "exposed" if lineages else "not trained on",
        "copies": len(report.get("copies", [])),
        "kept_copies": kept,
        "blocks": report.get("blocks", 0),
        "retraction": report.get("retraction") or "",
        "blocklist_added": report.get("blocklist_added", 0),
        "unproduced_batches": len(report.get("unproduced_batches", [])),
        "exposures": len(report.get("exposures", [])),
        "first_checkpoint": report.get("first_checkpoint") or "",
        "tagged_versions": ", ".join(report.get("tagged_versions", [])),
        "lineages": dg.MetadataValue.md(table if lineages else "no checkpoint trained on these blocks"),
        "report": dg.MetadataValue.url(uri),
    }


@dg.sensor(
    name="takedown_report_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Lists takedowns/*/report.json in the pipeline's bucket; each new or rewritten report becomes a "
    "partition of takedown_report and a materialization with the request's figures.",
)
def takedown_report_sensor(context: dg.SensorEvaluationContext, s3: S3Resource, layout: PipelineLayout):
    client = s3.get_client()
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    events, new = [], []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=layout.bucket, Prefix=TAKEDOWNS_PREFIX):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if not key.endswith("/report.json") or seen.get(key) == obj["ETag"]:
                continue
            request_id = key[len(TAKEDOWNS_PREFIX) : -len("/report.json")]
            report = json.loads(client.get_object(Bucket=layout.bucket, Key=key)["Body"].read())
            uri = f"s3://{layout.bucket}/{key}"
            events.append(
                dg.AssetMaterialization(TAKEDOWN_REPORT, partition=request_id, metadata=report_metadata(report, uri))
            )
            new.append(request_id)
            seen[key] = obj["ETag"]
    if not events:
        return dg.SensorResult(skip_reason="no new takedown report", cursor=json.dumps(seen))
    known = set(context.instance.get_dynamic_partitions(takedown_requests.name))
    fresh = sorted(set(new) - known)
    return dg.SensorResult(
        asset_events=events,
        dynamic_partitions_requests=[takedown_requests.build_add_request(fresh)] if fresh else [],
        cursor=json.dumps(seen),
    )
