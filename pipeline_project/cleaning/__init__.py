"""Plain-Python cleaning library: readers, repair, language ID, quality filters, PII, dedup, shards.

Never imports dagster; the `cleaned_shards` asset configures and calls it.
"""

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup_index import DedupIndex, IndexEntry
from pipeline_project.cleaning.errors import CleaningError, CountsMismatchError
from pipeline_project.cleaning.pipeline import CleaningPipeline, CleaningResult
from pipeline_project.cleaning.publish import (
    PublishedBatch,
    ShardEntry,
    ShardManifest,
    iter_shard_texts,
    load_index,
    publish_batch,
    read_shard_manifest,
    save_index,
    verify_published,
)
from pipeline_project.cleaning.readers import read_object, read_stream
from pipeline_project.cleaning.records import DocState, Document, Dropped, Quarantined
from pipeline_project.cleaning.shards import Shard, read_shard, write_shards
from pipeline_project.cleaning.steps import StepStats

__all__ = [
    "CleaningConfig",
    "CleaningError",
    "CleaningPipeline",
    "CleaningResult",
    "CountsMismatchError",
    "DedupIndex",
    "DocState",
    "Document",
    "Dropped",
    "IndexEntry",
    "PublishedBatch",
    "Quarantined",
    "Shard",
    "ShardEntry",
    "ShardManifest",
    "StepStats",
    "iter_shard_texts",
    "load_index",
    "publish_batch",
    "read_object",
    "read_shard",
    "read_shard_manifest",
    "read_stream",
    "save_index",
    "verify_published",
    "write_shards",
]
