"""The exposure report on the model versions it names: each exposed checkpoint's MLflow model versions (found by
their `checkpoint_uri` tag) get a tag `takedown.<request>` with what that checkpoint read of the request's blocks,
and the run that registered them the whole report as an artifact `takedowns/<request>.json`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pipeline_project.ops.takedown.report import ExposureReport, ExposureRow


def checkpoint_summaries(exposures: Sequence[ExposureRow]) -> dict[str, dict]:
    """Per checkpoint URI: its lineage, the steps and ranks that read the request's blocks, blocks and tokens."""
    out: dict[str, dict] = {}
    for e in exposures:
        row = out.setdefault(e.checkpoint, {"lineage": e.lineage, "steps": set(), "ranks": set(), "blocks": set()})
        row["steps"].add(e.step)
        row["ranks"].add(e.rank)
        row["blocks"].add((e.partition, e.offset, e.block))
        row["tokens"] = row.get("tokens", 0) + e.tokens
    return {
        uri: {
            "lineage": r["lineage"],
            "steps": [min(r["steps"]), max(r["steps"])],
            "step_count": len(r["steps"]),
            "ranks": sorted(r["ranks"]),
            "blocks": len(r["blocks"]),
            "tokens": r["tokens"],
        }
        for uri, r in out.items()
    }


def tag_exposed_versions(client: Any, report: ExposureReport) -> list[str]:
    """Tag every model version of an exposed checkpoint and log the report to its run; the `name/version` tagged."""
    from pipeline_project.training.tracking.lineage import versions_of_checkpoints

    summaries = checkpoint_summaries(report.exposures)
    if not summaries:
        return []
    request = report.request.request_id
    body = report.model_dump_json(indent=1)
    tagged, runs = [], set()
    for uri, versions in versions_of_checkpoints(client, list(summaries)).items():
        value = json.dumps({**summaries[uri], "reason": report.request.reason}, separators=(",", ":"))
        for v in versions:
            client.set_model_version_tag(v.name, v.version, f"takedown.{request}", value[:5000])
            tagged.append(f"{v.name}/{v.version}")
            if v.run_id and v.run_id not in runs:
                runs.add(v.run_id)
                client.log_text(v.run_id, body, f"takedowns/{request}.json")
    return sorted(tagged)
