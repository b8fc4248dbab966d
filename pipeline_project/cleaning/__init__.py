"""Plain-Python cleaning library: readers, repair, language ID, quality filters, PII, dedup, shards.

Never imports dagster. The `cleaned_shards` asset reads a batch (`read_stream`), cleans it chunk by chunk with a
`StreamingCleaner` (filters in a `FilterPool`, dedup against the PostgreSQL index of `dedup_store`), writes shards and
the exclusion sink through a `BatchWriter` and publishes a `ShardManifest`.
"""

from pipeline_project.cleaning.chain.pool import FilterPool
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.errors import CleaningError, CountsMismatchError
from pipeline_project.cleaning.output.publish import (
    PublishedBatch,
    ShardEntry,
    ShardManifest,
    exclusion_recorder,
    iter_shard_texts,
    read_shard_manifest,
    verify_published,
    write_manifest,
)
from pipeline_project.cleaning.output.shards import Shard, read_shard, write_shards
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.read.readers import read_object, read_stream
from pipeline_project.cleaning.records import DocState, Document, Dropped, Quarantined
from pipeline_project.cleaning.steps import StepStats
from pipeline_project.cleaning.stream import StreamingCleaner, StreamResult

__all__ = [
    "BatchWriter",
    "CleaningConfig",
    "CleaningError",
    "CountsMismatchError",
    "DocState",
    "Document",
    "Dropped",
    "FilterPool",
    "PublishedBatch",
    "Quarantined",
    "Shard",
    "ShardEntry",
    "ShardManifest",
    "StepStats",
    "StreamResult",
    "StreamingCleaner",
    "exclusion_recorder",
    "iter_shard_texts",
    "read_object",
    "read_shard",
    "read_shard_manifest",
    "read_stream",
    "verify_published",
    "write_manifest",
    "write_shards",
]
