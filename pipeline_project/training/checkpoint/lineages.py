"""Checkpoint lineages as a user reaches them: which lineages there are, each one's newest checkpoint, the
Kafka position a checkpoint saved, and pulling one checkpoint (the newest, or a given step) into a directory.

A lineage is a prefix `s3://<bucket>/<root>/<lineage>/` with `latest.json` and `step-<n>-<id>/` folders
(`checkpoint.py`). Every reference is validated as the trainer validates it (`checkpoint_ref`), every download
goes through `checkpoint.download_prefix`. Torch is imported only by `pull_checkpoint`.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.training.checkpoint.ref import (
    DATA_STATE_FILE,
    RESUME_DIR,
    CheckpointRef,
    check_step_uri,
    make_ref,
    read_latest,
)
from pipeline_project.training.errors import CheckpointNotFoundError, InvalidCheckpointError
from pipeline_project.training.positions import positions


@dataclass(frozen=True)
class LineageHead:
    lineage: str
    ref: CheckpointRef | None  # None: no latest.json (yet), or an invalid one (`error`)
    error: str = ""


def lineage_prefix(root: str, lineage: str) -> str:
    return f"{root.strip('/')}/{lineage.strip('/')}"


def _subfolders(s3, bucket: str, prefix: str) -> list[str]:
    names = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/", Delimiter="/"):
        names += [p["Prefix"][len(prefix) + 1 :].rstrip("/") for p in page.get("CommonPrefixes", [])]
    return names


def list_lineages(s3, bucket: str, root: str) -> list[str]:
    """The lineages under `s3://bucket/root/`, by name."""
    return sorted(_subfolders(s3, bucket, root.strip("/")))


def newest_checkpoints(s3, bucket: str, root: str, lineages: list[str] | None = None) -> list[LineageHead]:
    """Each lineage's newest checkpoint (what its `latest.json` names), the most recently written first."""
    heads = []
    for lineage in list_lineages(s3, bucket, root) if lineages is None else lineages:
        try:
            heads.append(LineageHead(lineage, read_latest(s3, bucket, lineage_prefix(root, lineage)).ref))
        except InvalidCheckpointError as exc:
            heads.append(LineageHead(lineage, None, str(exc)))
    return sorted(heads, key=lambda h: h.ref.created_at if h.ref else "", reverse=True)


def saved_position(s3, bucket: str, ref: CheckpointRef) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """(topic, {partition: {"offset", "block", ...}}): where the checkpoint's data loaders stand, all ranks merged."""
    key = f"{key_in_bucket(ref.resume_uri, bucket)}{DATA_STATE_FILE}"
    states = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())["data_states"]
    topic = next((s.get("topic") for s in states if s.get("topic")), None)
    return topic, positions(states)


def step_refs(s3, bucket: str, prefix: str) -> dict[int, list[CheckpointRef]]:
    """Every step folder of the lineage at `prefix`, validated, by step (a step has two folders only when two
    invocations raced to it and the loser's could not be removed)."""
    steps: dict[int, list[CheckpointRef]] = {}
    for name in _subfolders(s3, bucket, prefix):
        match = re.fullmatch(r"step-(\d+)(-[0-9a-f]+)?", name)
        if match:
            step = int(match.group(1))
            check_step_uri(f"s3://{bucket}/{prefix}/{name}/", bucket, prefix, step)
            steps.setdefault(step, []).append(make_ref(bucket, f"{prefix}/{name}", step, ""))
    return steps


def resolve_checkpoint(s3, bucket: str, root: str, lineage: str, step: int | None = None) -> CheckpointRef:
    """The lineage's newest checkpoint, or its checkpoint at `step`; `CheckpointNotFoundError` names what exists."""
    prefix = lineage_prefix(root, lineage)
    latest = read_latest(s3, bucket, prefix).ref
    if latest is not None and step in (None, latest.step):
        return latest
    where = f"s3://{bucket}/{prefix}/"
    saved = step_refs(s3, bucket, prefix)
    if latest is None and (step is None or not saved):
        known = list_lineages(s3, bucket, root)
        names = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        raise CheckpointNotFoundError(f"no checkpoint lineage {lineage!r} at {where} (lineages: {names or 'none'})")
    refs = saved.get(step, [])
    if len(refs) != 1:
        steps = ", ".join(map(str, sorted(saved))) or "none"
        what = f"has no step {step}" if not refs else f"has {len(refs)} folders for step {step}, none in latest.json"
        raise CheckpointNotFoundError(f"lineage {lineage!r} at {where} {what} (steps: {steps})")
    return refs[0]


def pull_checkpoint(s3, bucket: str, ref: CheckpointRef, directory: str | Path) -> Path:
    """Download the checkpoint `ref` names (`hf/` and `resume/`) into `directory`, which must be new or empty, and
    check it is whole: a folder that a crash left half-uploaded (never named by latest.json) is refused."""
    from pipeline_project.training.checkpoint.store import HF_DIR, download_prefix, load_resume_state

    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise FileExistsError(f"{directory} exists and is not an empty directory")
    try:
        download_prefix(s3, bucket, key_in_bucket(ref.uri, bucket), directory)
        if not (directory / HF_DIR / "config.json").is_file() or not (directory / RESUME_DIR).is_dir():
            raise InvalidCheckpointError(f"{ref.uri} is incomplete (no {HF_DIR}/config.json or {RESUME_DIR}/)")
        resume = load_resume_state(directory)
        if resume.step != ref.step:
            raise InvalidCheckpointError(f"{ref.uri} holds the resume state of step {resume.step}, not {ref.step}")
    except BaseException:
        for child in directory.iterdir() if directory.is_dir() else ():  # leave it as empty as it was given
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    return directory
