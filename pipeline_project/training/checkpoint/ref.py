"""`latest.json`: the reference to a lineage's newest checkpoint, its format and its validation.

A lineage lives under `s3://<bucket>/<prefix>/`; `latest.json` there names one step folder directly under it:

    {"step": 7, "uri": "s3://<bucket>/<prefix>/step-7-<id>/", "hf_uri": "<uri>hf/",
     "resume_uri": "<uri>resume/", "created_at": "2026-12-06T07:00:00+00:00"}

Whatever the file says is checked before anything is downloaded: an integer step, and a URI in the lineage's own
bucket, directly under its prefix, in the folder of that step. Anything else raises `InvalidCheckpointError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.training.errors import InvalidCheckpointError

HF_DIR = "hf"
RESUME_DIR = "resume"
LATEST_FILE = "latest.json"
DATA_STATE_FILE = "data_state.json"  # in resume/: the data loaders' states as JSON (per-partition Kafka offsets)


@dataclass(frozen=True)
class CheckpointRef:
    step: int
    uri: str  # s3://bucket/checkpoints/<run>/step-<n>-<id>/
    hf_uri: str
    resume_uri: str
    created_at: str


@dataclass(frozen=True)
class LatestPointer:
    """`latest.json` as one invocation read it: the checkpoint it names and its ETag (None: no latest.json)."""

    ref: CheckpointRef | None
    etag: str | None


def make_ref(bucket: str, step_prefix: str, step: int, created_at: str) -> CheckpointRef:
    uri = f"s3://{bucket}/{step_prefix.strip('/')}/"
    return CheckpointRef(step, uri, f"{uri}{HF_DIR}/", f"{uri}{RESUME_DIR}/", created_at)


def check_step_uri(uri: object, bucket: str, prefix: str, step: int | None = None) -> str:
    """`uri` when it is a step folder directly under `s3://bucket/prefix/` (of `step`, when given); raises
    `InvalidCheckpointError` otherwise. Step folders are `step-<n>-<hex id>/` (`step-<n>/` before the id)."""
    lineage = f"s3://{bucket}/{prefix.strip('/')}/"
    number = r"\d+" if step is None else str(step)
    if not isinstance(uri, str) or not re.fullmatch(re.escape(lineage) + rf"step-{number}(-[0-9a-f]+)?/", uri):
        where = f"step-{'<n>' if step is None else step}-<id>/"
        raise InvalidCheckpointError(f"checkpoint uri {uri!r} is not a step folder {lineage}{where}")
    return uri


def parse_ref(raw: bytes, bucket: str, prefix: str) -> CheckpointRef:
    """The `CheckpointRef` in `raw` (the bytes of `s3://bucket/prefix/latest.json`), validated."""
    where = f"s3://{bucket}/{prefix.strip('/')}/{LATEST_FILE}"
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidCheckpointError(f"{where} is not JSON: {exc}") from None
    names = [f.name for f in fields(CheckpointRef)]
    if not isinstance(data, dict) or sorted(data) != sorted(names):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise InvalidCheckpointError(f"{where} must be an object with exactly {names}, got {got}")
    step = data["step"]
    if type(step) is not int or step < 0:
        raise InvalidCheckpointError(f"{where}: step {step!r} is not a non-negative integer")
    try:
        uri = check_step_uri(data["uri"], bucket, prefix, step)
    except InvalidCheckpointError as exc:
        raise InvalidCheckpointError(f"{where}: {exc}") from None
    if not isinstance(data["created_at"], str):
        raise InvalidCheckpointError(f"{where}: created_at {data['created_at']!r} is not a string")
    ref = make_ref(bucket, key_in_bucket(uri, bucket), step, data["created_at"])
    if (data["hf_uri"], data["resume_uri"]) != (ref.hf_uri, ref.resume_uri):
        raise InvalidCheckpointError(f"{where}: hf_uri / resume_uri are not {ref.hf_uri} / {ref.resume_uri}")
    return ref


def read_latest(s3, bucket: str, prefix: str) -> LatestPointer:
    """`latest.json` under `prefix` and its ETag; `LatestPointer(None, None)` when there is none yet."""
    try:
        got = s3.get_object(Bucket=bucket, Key=f"{prefix.strip('/')}/{LATEST_FILE}")
    except s3.exceptions.NoSuchKey:
        return LatestPointer(ref=None, etag=None)
    return LatestPointer(ref=parse_ref(got["Body"].read(), bucket, prefix), etag=got["ETag"])


def latest_ref(s3, bucket: str, prefix: str) -> CheckpointRef | None:
    return read_latest(s3, bucket, prefix).ref
