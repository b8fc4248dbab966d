"""What a training step read, or what a Kafka message holds, down to the raw documents (`provenance.trace`)."""

from __future__ import annotations

from typing import Any

from pipeline_project.ops.connect import kafka_settings
from pipeline_project.settings import Settings


def step(
    settings: Settings, step: int, rank: int, *, lineage: str | None, checkpoint: str | None, shards_prefix: str
) -> dict[str, Any]:
    from pipeline_project.provenance.trace import trace_step

    if (lineage is None) == (checkpoint is None):
        raise ValueError("give one of --lineage or --checkpoint")
    return trace_step(
        kafka_settings(settings),
        settings.s3_client(),
        settings.bucket,
        step,
        rank,
        checkpoint_prefix=lineage,
        checkpoint=checkpoint,
        shards_prefix=shards_prefix,
    )


def message(settings: Settings, partition: int, offset: int, *, topic: str | None, shards_prefix: str) -> dict:
    from pipeline_project.provenance.trace import trace_message

    return trace_message(
        kafka_settings(settings),
        settings.s3_client(),
        settings.bucket,
        topic or settings.topic,
        partition,
        offset,
        shards_prefix=shards_prefix,
    )
