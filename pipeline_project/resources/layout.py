"""Where the pipeline keeps things: one bucket, fixed prefixes, one topic. Configurable per deployment."""

from __future__ import annotations

import dagster as dg

from pipeline_project.settings import DEFAULT_BUCKET, DEFAULT_RAW_PREFIX, DEFAULT_TOPIC


class PipelineLayout(dg.ConfigurableResource):
    bucket: str = DEFAULT_BUCKET
    raw_prefix: str = DEFAULT_RAW_PREFIX
    shards_prefix: str = "shards/"
    exclusions_prefix: str = "exclusions/"
    dedup_prefix: str = "dedup/"
    checkpoints_prefix: str = "checkpoints/"
    topic: str = DEFAULT_TOPIC
    topic_partitions: int = 8
    replication_factor: int = 3
    min_insync_replicas: int = 2
    seq_len: int = 256
    message_bytes: int = 128 * 1024
    """Target Kafka message size: small enough that a batch spreads over all partitions (and so over
    all loader ranks), large enough that per-message overhead stays negligible."""
    max_objects_per_batch: int = 500

    def shard_dir(self, batch_id: str) -> str:
        return f"{self.shards_prefix}{batch_id}/"

    def exclusions_dir(self, batch_id: str) -> str:
        return f"{self.exclusions_prefix}{batch_id}/"

    @property
    def dedup_index_key(self) -> str:
        return f"{self.dedup_prefix}index.bin"
