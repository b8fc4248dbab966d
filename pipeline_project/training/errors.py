"""The errors the training package raises: all subclass `TrainingError`.

Each also subclasses the builtin it replaced (`ValueError`, `RuntimeError`), so callers that catch the
builtin keep working, and a `ValueError` raised in a pydantic validator still becomes a `ValidationError`.
This module imports nothing, so the torch-free modules (`config`, `job`) can raise these too.
"""

from __future__ import annotations


class TrainingError(Exception):
    """Base of every error raised by `pipeline_project.training`."""


class PresetError(TrainingError, ValueError):
    """A model preset cannot be built: no path for `from_pretrained`, not a DeepseekV3 config, or a
    tokenizer vocabulary larger than the embedding table."""


class CheckpointMismatchError(TrainingError, ValueError):
    """The checkpoint to continue from was trained with another tokenizer than this job's."""


class CheckpointWriteError(TrainingError, RuntimeError):
    """Writing a checkpoint produced an incomplete folder (e.g. no safetensors weights)."""


class CheckpointConflictError(TrainingError, RuntimeError):
    """`latest.json` moved after this invocation read it: another training run advanced the lineage first.

    The losing invocation's checkpoint is left unreferenced (and removed best-effort); `latest.json` keeps
    pointing at the winner's. Run the training again to continue from the winner's checkpoint."""


class InvalidCheckpointError(TrainingError, ValueError):
    """A checkpoint reference or listing that must not be followed: a `latest.json` that is not a valid
    reference (no integer step, a URI outside the lineage's prefix or bucket), or an S3 key that would be
    written outside the download directory."""


class RankFailedError(TrainingError, RuntimeError):
    """A step that one rank ran for all (rank 0 reading `latest.json`, a node's local rank 0 downloading the
    checkpoint) failed there; the other ranks raise this with its message instead of waiting forever."""


class CheckpointNotFoundError(TrainingError, LookupError):
    """No checkpoint where one was asked for: an unknown lineage, or a step the lineage never saved."""


class CudaUnavailableError(TrainingError, RuntimeError):
    """The job asks for CUDA (`device: cuda`, as every GPU launch does) and torch cannot use this rank's GPU: no
    driver, a driver older than torch's CUDA build needs, or fewer GPUs than local ranks."""
