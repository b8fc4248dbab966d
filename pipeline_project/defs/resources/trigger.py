"""When the checkpoint trigger asks for training, and how a triggered run is bounded (`sensors.checkpoint_trigger`)."""

from __future__ import annotations

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.settings import (
    DEFAULT_MIN_NEW_TOKENS,
    DEFAULT_TRAINING_MAX_RUNTIME_S,
    DEFAULT_TRIGGER_MAX_STEPS,
    DEFAULT_TRIGGER_RETRY_BASE_S,
    DEFAULT_TRIGGER_RETRY_MAX_S,
)


class TrainingTrigger(dg.ConfigurableResource):
    min_new_tokens: int = DEFAULT_MIN_NEW_TOKENS
    """Untrained tokens in the topic that make a training run worth requesting ($PIPELINE_MIN_NEW_TOKENS)."""
    max_steps: int = DEFAULT_TRIGGER_MAX_STEPS
    """A triggered run trains at most this many steps; 0: no bound ($PIPELINE_TRIGGER_MAX_STEPS)."""
    retry_base_s: float = DEFAULT_TRIGGER_RETRY_BASE_S
    """The backoff after a failed training run, doubled per failure in a row ($PIPELINE_TRIGGER_RETRY_BASE_S) ..."""
    retry_max_s: float = DEFAULT_TRIGGER_RETRY_MAX_S
    """... up to this ($PIPELINE_TRIGGER_RETRY_MAX_S)."""
    max_runtime_s: int = DEFAULT_TRAINING_MAX_RUNTIME_S
    """The triggered run's `dagster/max_runtime` tag ($PIPELINE_TRAINING_MAX_RUNTIME_S)."""
    backlog_url: str = ""
    """The PostgreSQL (libpq URL) that keeps the untrained batches between ticks (`defs.assets.backlog.store`): the
    deployment's, $PIPELINE_POSTGRES_URL. "": a SQLite file beside the Dagster instance (tests, `dagster dev`)."""

    s3: S3Resource | None = None
    layout: PipelineLayout | None = None
    """Where the trained lineage keeps its checkpoints: the backlog counts from what its latest.json names (a rewind
    moves it back). None: from the newest checkpoint materialization alone (tests without S3)."""
