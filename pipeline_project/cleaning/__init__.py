"""Plain-Python cleaning library: readers, repair, language ID, quality filters, PII, dedup, shards.

Never imports dagster; the `cleaned_shards` asset configures and calls it.
"""

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup_index import DedupIndex, IndexEntry
from pipeline_project.cleaning.pipeline import CleaningPipeline, CleaningResult, build_steps
from pipeline_project.cleaning.readers import read_object
from pipeline_project.cleaning.records import Document, Dropped, Quarantined
from pipeline_project.cleaning.shards import Shard, read_shard, write_shards
from pipeline_project.cleaning.steps import StepStats

__all__ = [
    "CleaningConfig",
    "CleaningPipeline",
    "CleaningResult",
    "DedupIndex",
    "Document",
    "Dropped",
    "IndexEntry",
    "Quarantined",
    "Shard",
    "StepStats",
    "build_steps",
    "read_object",
    "read_shard",
    "write_shards",
]
