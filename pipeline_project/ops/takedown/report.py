"""The takedown request and its exposure report as typed objects, and where they are stored: next to each other
under `takedowns/<request>/` in the pipeline's bucket (`request.json` first, then `report.json`)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PREFIX = "takedowns/"


class TakedownRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str
    reason: str = Field(min_length=1)
    target_kind: str  # "source" | "doc" | "text"
    target: str  # the key, the document id, or the text file's name
    operator: str = ""
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    @field_validator("request_id")
    @classmethod
    def _safe(cls, value: str) -> str:
        if not REQUEST_ID.fullmatch(value):
            raise ValueError(f"request id {value!r}: 1-128 of letters, digits and ._- (starting with a letter/digit)")
        return value


class CopyRow(BaseModel):
    batch: str
    doc_id: str
    kind: str
    similarity: float
    state: str
    reason: str = ""
    blocks: int = 0  # blocks of the topic holding it
    produced: bool = False


class ExposureRow(BaseModel):
    lineage: str
    checkpoint: str
    step: int
    rank: int
    partition: int
    offset: int
    block: int
    batch: str
    doc_id: str
    tokens: int


class LineageExposure(BaseModel):
    lineage: str
    first_checkpoint: str
    first_step: int
    steps: int  # distinct steps that read a block of the takedown
    ranks: list[int]
    tokens: int  # the copies' tokens trained, over every exposure


class ExposureReport(BaseModel):
    request: TakedownRequest
    fingerprints: int
    copies: list[CopyRow]
    blocks: int  # blocks of the topic holding a kept copy
    retraction: str | None  # the retraction request written (None: no block to retract)
    retracted_now: int  # blocks this run retracted (0 when an earlier run of the request had)
    blocklist_added: int
    unproduced_batches: list[str]
    exposures: list[ExposureRow]
    lineages: list[LineageExposure]
    first_checkpoint: str | None  # the checkpoint holding the earliest exposing step of any lineage
    checkpoints_read: int
    report_uri: str = ""
    tagged_versions: list[str] = Field(default_factory=list)  # MLflow model versions tagged `takedown.<request>`
    not_done: list[str] = Field(default_factory=list)


def request_key(request_id: str) -> str:
    return f"{PREFIX}{request_id}/request.json"


def report_key(request_id: str) -> str:
    return f"{PREFIX}{request_id}/report.json"


def _put(s3: Any, bucket: str, key: str, body: dict) -> None:
    data = json.dumps(body, indent=1, sort_keys=True).encode()
    s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/json")


def write_request(s3: Any, bucket: str, request: TakedownRequest) -> None:
    _put(s3, bucket, request_key(request.request_id), request.model_dump(mode="json"))


def write_report(s3: Any, bucket: str, report: ExposureReport) -> ExposureReport:
    key = report_key(report.request.request_id)
    report = report.model_copy(update={"report_uri": f"s3://{bucket}/{key}"})
    _put(s3, bucket, key, report.model_dump(mode="json"))
    return report


def read_report(s3: Any, bucket: str, request_id: str) -> ExposureReport | None:
    try:
        raw = s3.get_object(Bucket=bucket, Key=report_key(request_id))["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return ExposureReport.model_validate_json(raw)
