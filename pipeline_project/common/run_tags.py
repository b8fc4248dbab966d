"""The MLflow tag vocabulary every pipeline run shares, so one filter finds a run from any side of the pipeline.

`dagster_run_id` (the Dagster run that made it), `partition` (the asset partition(s) it covers), `asset` (the
Dagster asset), `code_version` (this package's version) and `config_hash` (what configured the work).
"""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

TAG_KEYS = ("dagster_run_id", "partition", "asset", "code_version", "config_hash")


def code_version() -> str:
    try:
        return version("pipeline_project")
    except PackageNotFoundError:
        return "unknown"


def config_hash(config: Any) -> str:
    """sha256 (first 16 hex digits) of the config as canonical JSON."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_tags(
    *, dagster_run_id: str | None, partition: str | None, asset: str, config_hash: str, **extra: Any
) -> dict[str, str]:
    """The vocabulary's tags (those known; None is left out) plus `extra`, all as strings."""
    tags = {"dagster_run_id": dagster_run_id, "partition": partition, "asset": asset,
            "code_version": code_version(), "config_hash": config_hash, **extra}  # fmt: skip
    return {k: str(v) for k, v in tags.items() if v is not None}
