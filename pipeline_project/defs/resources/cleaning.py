"""The cleaning configuration as a resource, so a deployment can change it without code."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg


class CleaningResource(dg.ConfigurableResource):
    """`config_path` names a JSON file of `CleaningConfig` fields; unset means the versioned defaults.

    The rest sizes the work, never what is kept: `workers` processes run the per-document filters (0: one per
    CPU of the container's cgroup quota, no more than its memory limit holds at `worker_memory_mb` each; 1: in
    process), and a batch streams through in chunks of `chunk_docs`
    documents or `chunk_mb` of text, whichever comes first, so memory does not grow with the batch. A batch
    of less than `pool_min_mb` raw bytes is cleaned in process: starting the workers (each loads the chain's
    models) costs more than its filters would (0: always use the workers). In process or in the workers, each
    document runs under the config's CPU budget (`limits`); over it, it is quarantined `processing_timeout`.
    """

    config_path: str | None = None
    workers: int = 0
    chunk_docs: int = 5000
    chunk_mb: int = 64
    max_shard_mb: int = 32
    pool_min_mb: float = 4.0
    worker_memory_mb: int = 1024

    def config(self):
        from pipeline_project.cleaning import CleaningConfig

        overrides = json.loads(Path(self.config_path).read_text()) if self.config_path else {}
        return CleaningConfig.model_validate(overrides)

    def worker_count(self, batch_bytes: int | None = None) -> int:
        """Filter processes for a batch of `batch_bytes` raw bytes (1: in process)."""
        from pipeline_project.cleaning.chain.document import default_workers

        if batch_bytes is not None and batch_bytes < self.pool_min_mb * (1 << 20):
            return 1
        return self.workers if self.workers > 0 else default_workers(self.worker_memory_mb)
