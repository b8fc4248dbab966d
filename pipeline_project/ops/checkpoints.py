"""Checkpoints as a user reaches them: the pipeline's default lineage, and pulling one step into a directory."""

from __future__ import annotations

from pathlib import Path

from pipeline_project.settings import Settings


def defaults() -> tuple[str, str]:
    """(checkpoints root, lineage) as the pipeline's resources default them: `PipelineLayout.checkpoints_prefix`
    and `TrainerResource.run_name`."""
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.defs.resources.trainer import TrainerResource

    return PipelineLayout.model_fields["checkpoints_prefix"].default, TrainerResource.model_fields["run_name"].default


def pull(settings: Settings, directory: Path, lineage: str | None = None, step: int | None = None):
    """Download a checkpoint (the lineage's newest, or `step`) into `directory`: (its reference, the lineage)."""
    from pipeline_project.training.checkpoint.lineages import pull_checkpoint, resolve_checkpoint

    s3 = settings.s3_client()
    root, default_lineage = defaults()
    lineage = lineage or default_lineage
    ref = resolve_checkpoint(s3, settings.bucket, root, lineage, step)
    pull_checkpoint(s3, settings.bucket, ref, directory)
    return ref, lineage


def rewind(settings: Settings, lineage: str | None, step: int, reason: str):
    """Make the lineage's checkpoint at `step` its newest (`training.checkpoint.rewind`), then move the registered
    model's `latest-checkpoint` alias back to that checkpoint's version: (the `Rewind` done, the version the alias
    names now, or why it was not moved)."""
    from pipeline_project.streaming.ledger.retire import default_operator
    from pipeline_project.training.checkpoint.rewind import rewind as rewind_lineage

    root, default_lineage = defaults()
    lineage = lineage or default_lineage
    done = rewind_lineage(
        settings.s3_client(), settings.bucket, root, lineage, step, reason=reason, operator=default_operator()
    )
    try:
        from mlflow.tracking import MlflowClient

        from pipeline_project.training.tracking.lineage import point_alias_at

        version = point_alias_at(MlflowClient(settings.mlflow_tracking_uri), lineage, done.to.hf_uri)
        alias = f"version {version}" if version else "not moved: no model version of that checkpoint"
    except Exception as exc:  # noqa: BLE001 - the rewind stands; the alias is the registry's view of it
        alias = f"not moved: {type(exc).__name__}: {exc}"
    return done, alias
