"""Rewinding a lineage: an earlier step's checkpoint becomes the one `latest.json` names, so the next invocation
continues from it (with every retraction made since), and the later checkpoints stay, each marked.

The move is a conditional write on the `latest.json` read at the start (`IfMatch` its ETag): a training run that
advanced the lineage meanwhile wins, and the rewind raises `CheckpointConflictError` (run it again). A write whose
answer was lost is settled by reading `latest.json` back. Only a whole checkpoint is a target (its `hf/config.json`
and `resume/` state are there): a folder a crash left half-uploaded is refused. Each later step folder gets
`REWOUND.json` (to which step, why, by whom, when) after the move; a failure there leaves the move standing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.training.checkpoint.lineages import lineage_prefix, resolve_checkpoint, step_refs
from pipeline_project.training.checkpoint.ref import (
    DATA_STATE_FILE,
    HF_DIR,
    LATEST_FILE,
    RESUME_DIR,
    CheckpointRef,
    make_ref,
    read_latest,
)
from pipeline_project.training.errors import CheckpointConflictError, CheckpointNotFoundError, InvalidCheckpointError

MARKER_FILE = "REWOUND.json"


@dataclass(frozen=True)
class Rewind:
    lineage: str
    rewound_from: CheckpointRef
    to: CheckpointRef
    reason: str
    operator: str
    marked: list[str] = field(default_factory=list)  # the later step folders marked REWOUND.json


def rewind(s3, bucket: str, root: str, lineage: str, step: int, *, reason: str, operator: str) -> Rewind:
    """Make step `step` the lineage's newest checkpoint; the steps after it are kept and marked."""
    if not reason.strip():
        raise ValueError("a rewind needs a reason (it is written into each later checkpoint's REWOUND.json)")
    prefix = lineage_prefix(root, lineage)
    pointer = read_latest(s3, bucket, prefix)
    if pointer.ref is None:
        raise CheckpointNotFoundError(f"lineage {lineage!r} at s3://{bucket}/{prefix}/ has no latest.json to rewind")
    if step >= pointer.ref.step:
        raise ValueError(f"lineage {lineage!r} is at step {pointer.ref.step}: a rewind goes back, to a step below it")
    found = resolve_checkpoint(s3, bucket, root, lineage, step)
    _check_whole(s3, bucket, found)
    target = make_ref(bucket, key_in_bucket(found.uri, bucket), step, datetime.now(timezone.utc).isoformat())
    _move_latest(s3, bucket, prefix, target, pointer.etag)
    done = Rewind(lineage, pointer.ref, target, reason, operator)
    marker = json.dumps({"rewound_to": asdict(target), "reason": reason, "operator": operator}).encode()
    for later, refs in sorted(step_refs(s3, bucket, prefix).items()):
        for ref in refs if later > step else ():
            s3.put_object(Bucket=bucket, Key=f"{key_in_bucket(ref.uri, bucket)}{MARKER_FILE}", Body=marker)
            done.marked.append(ref.uri)
    return done


def _check_whole(s3, bucket: str, ref: CheckpointRef) -> None:
    base = key_in_bucket(ref.uri, bucket)
    for name in (f"{HF_DIR}/config.json", f"{RESUME_DIR}/state.pt", f"{RESUME_DIR}/{DATA_STATE_FILE}"):
        try:
            s3.head_object(Bucket=bucket, Key=f"{base}{name}")
        except s3.exceptions.ClientError:
            raise InvalidCheckpointError(
                f"{ref.uri} is incomplete (no {name}): not a checkpoint to rewind to"
            ) from None


def _move_latest(s3, bucket: str, prefix: str, target: CheckpointRef, etag: str) -> None:
    try:
        s3.put_object(
            Bucket=bucket,
            Key=f"{prefix}/{LATEST_FILE}",
            Body=json.dumps(asdict(target)).encode(),
            ContentType="application/json",
            IfMatch=etag,
        )
    except Exception as exc:
        if read_latest(s3, bucket, prefix).ref == target:
            return
        raise CheckpointConflictError(
            f"s3://{bucket}/{prefix}/{LATEST_FILE} moved while rewinding (a training run advanced the lineage): "
            f"nothing was rewound; run the rewind again ({exc})"
        ) from exc
