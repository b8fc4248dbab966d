"""Progress and the result of a training invocation, to the log and (under dagster-pipes) to Dagster.

Only rank 0 opens the pipes connection; every other rank reports to its log alone. This module imports
`dagster_pipes` (the small, dependency-free client), never `dagster`: the trainer runs without Dagster.
`Reporter.materialize` turns a `TrainJobResult` into the asset materialization's metadata (the run URL as a
url, offsets and positions as json, the loss summary as `loss_*` numbers, the loss curve as markdown with the
image MLflow serves, the registered model version and its URL, unset optional values left out).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from pipeline_project.training.job import TrainJobResult
from pipeline_project.training.loss_summary import describe_change, describe_loss

log = logging.getLogger("pipeline_project.training")


class Reporter:
    """Log lines to stdout, and to Dagster when running under dagster-pipes (rank 0 only)."""

    def __init__(self, pipes: Any = None):
        self.pipes = pipes

    def info(self, message: str) -> None:
        log.info(message)
        if self.pipes is not None:
            self.pipes.log.info(message)

    def warning(self, message: str) -> None:
        log.warning(message)
        if self.pipes is not None:
            self.pipes.log.warning(message)

    def materialize(self, result: TrainJobResult) -> None:
        if self.pipes is None:
            return
        self.pipes.report_asset_materialization(metadata=materialization_metadata(result))


def materialization_metadata(result: TrainJobResult) -> dict[str, Any]:
    """The dagster-pipes metadata of one invocation's materialization."""
    metadata: dict[str, Any] = {
        "status": result.status,
        "message": result.message,
        "steps": result.steps,
        "end_step": result.end_step,
        "tokens": result.tokens,
        "offsets_consumed": {"raw_value": result.offsets_consumed, "type": "json"},
        "end_position": {"raw_value": result.end_position, "type": "json"},
        "world_size": result.world_size,
        "device": result.device,
        "dead_letters": result.dead_letters,
        "retracted_blocks": result.retracted_blocks,
        "backlog_batches": result.backlog_batches,
    }
    for key in ("final_loss", "tokens_per_s", "data_wait_fraction"):
        if getattr(result, key) is not None:
            metadata[key] = getattr(result, key)
    if result.loss is not None:
        metadata.update(result.loss.as_metrics())
    for key in (
        "topic",
        "checkpoint_uri",
        "hf_uri",
        "resumed_from",
        "mlflow_run_id",
        "mlflow_model_uri",
        "mlflow_error",
    ):
        if getattr(result, key):
            metadata[key] = getattr(result, key)
    if result.mlflow_run_url:
        metadata["mlflow_run_url"] = {"raw_value": result.mlflow_run_url, "type": "url"}
    if result.model_version:
        metadata["registered_model"] = f"{result.registered_model} v{result.model_version}"
        metadata["model_version_url"] = {"raw_value": result.model_version_url, "type": "url"}
    if result.loss_curve_url:
        metadata["loss_curve"] = {"raw_value": loss_curve_markdown(result), "type": "md"}
    return metadata


def loss_curve_markdown(result: TrainJobResult) -> str:
    """The loss-curve image (served by MLflow) with a line of figures under it, as the materialization shows it."""
    figures = f"steps {result.start_step}\u2192{result.end_step}"
    if result.loss is not None:
        figures += f", loss {describe_loss(result.loss)}, {describe_change(result.loss)}"
    return f"![loss curve]({result.loss_curve_url})\n\n{figures} ([image]({result.loss_curve_url}))"


@contextlib.contextmanager
def pipes_if_present(is_main: bool) -> Iterator[Any]:
    """The dagster-pipes context when this is rank 0 of a process Dagster launched; None otherwise."""
    if is_main:
        from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes

        if PipesEnvVarParamsLoader().is_dagster_pipes_process():
            with open_dagster_pipes() as pipes:
                yield pipes
            return
    yield None
