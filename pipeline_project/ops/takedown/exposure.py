"""Which checkpoints already trained on a takedown's blocks, from the step logs (`provenance/steps.json`).

Every checkpoint folder of every lineage is read (rewound ones too: they trained what they trained), each holding
per step and rank the runs `[partition, offset, first block, count]` its ranks read since the checkpoint before
it. A run that covers a block of the takedown is an exposure: lineage, checkpoint, step, rank, the block and the
copy's tokens in it. Blocks a step passed over as retracted are in the step log's `retracted`, not in its runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pipeline_project.ops.takedown.blocks import BlockHit
from pipeline_project.ops.takedown.report import ExposureRow


def exposures_in_steps(
    body: dict, lineage: str, checkpoint: str, topic: str, hits: Sequence[BlockHit]
) -> list[ExposureRow]:
    """The exposures recorded in one checkpoint's steps.json (`body`); none when it trained another topic."""
    if body.get("topic") != topic or not hits:
        return []
    by_message: dict[tuple[int, int], list[BlockHit]] = {}
    for h in hits:
        by_message.setdefault((h.partition, h.offset), []).append(h)
    out = []
    for rank, steps in enumerate(body.get("ranks", [])):
        for step, runs in steps.items():
            for p, offset, first, count in runs:
                for h in by_message.get((int(p), int(offset)), ()):
                    if int(first) <= h.block < int(first) + int(count):
                        out.append(
                            ExposureRow(
                                lineage=lineage,
                                checkpoint=checkpoint,
                                step=int(step),
                                rank=rank,
                                partition=h.partition,
                                offset=h.offset,
                                block=h.block,
                                batch=h.batch,
                                doc_id=h.doc_id,
                                tokens=h.tokens,
                            )
                        )
    return out


def first_exposures(exposures: Sequence[ExposureRow]) -> dict[str, ExposureRow]:
    """Per lineage, its earliest exposure (lowest step; then checkpoint, rank)."""
    first: dict[str, ExposureRow] = {}
    for e in sorted(exposures, key=lambda e: (e.step, e.checkpoint, e.rank, e.offset, e.block)):
        first.setdefault(e.lineage, e)
    return first


def read_exposures(
    s3: Any, bucket: str, root: str, topic: str, hits: Sequence[BlockHit], lineages: Sequence[str] | None = None
) -> tuple[list[ExposureRow], int]:
    """(exposures, checkpoints read) over every checkpoint of `lineages` (default: all under `root`)."""
    from pipeline_project.common.s3 import key_in_bucket
    from pipeline_project.training.checkpoint.lineages import lineage_prefix, list_lineages, step_refs
    from pipeline_project.training.step_log import STEPS_FILE

    found: list[ExposureRow] = []
    read = 0
    if not hits:
        return found, read
    for lineage in lineages if lineages is not None else list_lineages(s3, bucket, root):
        for _step, refs in sorted(step_refs(s3, bucket, lineage_prefix(root, lineage)).items()):
            for ref in refs:
                key = f"{key_in_bucket(ref.uri, bucket).rstrip('/')}/{STEPS_FILE}"
                try:
                    body = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
                except s3.exceptions.NoSuchKey:
                    continue  # saved before step logs, or half uploaded
                read += 1
                found += exposures_in_steps(body, lineage, ref.uri, topic, hits)
    return sorted(found, key=lambda e: (e.lineage, e.step, e.rank, e.partition, e.offset, e.block)), read
