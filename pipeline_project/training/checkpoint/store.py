"""Checkpoints: an HF-format model (safetensors + tokenizer files) and the resume state, local and in S3.

Layout, locally under one directory and in S3 under `checkpoints/<run_name>/step-<n>-<id>/`:

    hf/       config.json, model.safetensors, generation_config.json, tokenizer files, and `MLmodel` with
              components/tokenizer/: an MLflow model in place (`mlflow_model`)
    resume/   state.pt (optimizer, step, tokens, RNG, data-loader states of all ranks)
              data_state.json (the same loader states, readable: per-partition Kafka offsets)
    provenance/ steps.json (the blocks every rank read at each step since the checkpoint before it, written
              by the trainer: `step_log`; read by `pipeline-project trace`)

`<id>` is fresh for every upload, so two invocations that train to the same step never write into the
same prefix. `checkpoints/<run_name>/latest.json` points at the newest complete step. It is written last,
so a crash mid-upload leaves the previous checkpoint current, and only with a conditional write: `IfMatch`
the ETag this invocation read at its start (`IfNoneMatch="*"` when there was none). If another invocation
moved it meanwhile, the write fails and `CheckpointConflictError` is raised; the loser's step folder is not
referenced. botocore retries a write whose answer was lost, and the retry of a write the server already applied
is refused like a lost race; so on any failed write `latest.json` is read again, and if it names this upload the
write succeeded. The upload is removed only when `latest.json` names another writer's checkpoint. A save that
writes no safetensors raises `CheckpointWriteError` before anything is uploaded.

Reading never trusts S3: `latest.json` is validated (`checkpoint_ref.parse_ref`) and every downloaded key must
land inside the target directory (`ingest.key_to_path`), else `InvalidCheckpointError`.

`state.pt` holds only tensors and plain Python values (the numpy RNG state is stored as a list), and is
read with `torch.load(weights_only=True)`: a file from S3 cannot run code when it is loaded. Files written
before this format, with a numpy array inside, load through an allowlist of numpy's array constructors.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from pipeline_project.common.s3 import UnsafeKeyError, key_in_bucket, key_to_path
from pipeline_project.settings import Settings
from pipeline_project.training.checkpoint.mlmodel import write_mlflow_model
from pipeline_project.training.checkpoint.ref import (
    DATA_STATE_FILE,
    HF_DIR,
    LATEST_FILE,
    RESUME_DIR,
    CheckpointRef,
    LatestPointer,
    latest_ref,
    make_ref,
    read_latest,
)
from pipeline_project.training.errors import CheckpointConflictError, CheckpointWriteError, InvalidCheckpointError

log = logging.getLogger(__name__)

__all__ = ["HF_DIR", "LATEST_FILE", "RESUME_DIR", "CheckpointRef", "LatestPointer"]  # re-exported

STATE_FILE = "state.pt"


class SavesTokenizer(Protocol):
    def save(self, directory: str | Path) -> Any: ...


@dataclass
class ResumeState:
    step: int
    tokens_seen: int
    optimizer: dict[str, Any]
    data_states: list[Any]  # one loader state_dict per rank, in rank order
    rng: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # train config, tokenizer name/hash, ...


@dataclass(frozen=True)
class LoadedCheckpoint:
    ref: CheckpointRef
    hf_dir: Path
    resume: ResumeState


def capture_rng() -> dict[str, Any]:
    """Every RNG state as tensors and plain Python values, so `torch.load(weights_only=True)` reads it back."""
    name, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    rng = {
        "python": random.getstate(),  # (version, tuple of 625 ints, gauss_next)
        "numpy": {"name": name, "key": key.tolist(), "pos": pos, "has_gauss": has_gauss, "gauss": gauss},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    if "python" in rng:
        version, internal, gauss_next = rng["python"]
        random.setstate((version, tuple(internal), gauss_next))
    if "numpy" in rng:
        state = rng["numpy"]
        if isinstance(state, dict):
            key = np.asarray(state["key"], dtype=np.uint32)
            np.random.set_state((state["name"], key, state["pos"], state["has_gauss"], state["gauss"]))
        else:  # written before the plain format: numpy's own tuple
            np.random.set_state(state)
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def save_checkpoint(
    directory: str | Path,
    *,
    model: nn.Module,
    tokenizer: SavesTokenizer | None,
    resume: ResumeState,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write `hf/` and `resume/` under `directory` (pass the unwrapped model, not the DDP wrapper). `weights`: the
    whole model's state when `model` is sharded (`sharding.full_model_state`), so `hf/` holds every weight."""
    directory = Path(directory)
    hf_dir, resume_dir = directory / HF_DIR, directory / RESUME_DIR
    hf_dir.mkdir(parents=True, exist_ok=True)
    resume_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(hf_dir, state_dict=weights)  # safetensors is the only format transformers 5 writes
    if not (hf_dir / "model.safetensors").exists() and not (hf_dir / "model.safetensors.index.json").exists():
        raise CheckpointWriteError(f"save_pretrained wrote no safetensors into {hf_dir}")
    if tokenizer is not None:
        tokenizer.save(hf_dir)
    try:
        write_mlflow_model(hf_dir, tokenizer)  # MLflow's loaders read hf/ in place (`mlflow_model`)
    except ImportError as exc:  # an install without MLflow's model modules: the checkpoint itself is whole
        log.warning("no MLmodel written into %s (%s): MLflow's loaders cannot read this checkpoint", hf_dir, exc)
    torch.save(asdict(resume), resume_dir / STATE_FILE)
    (resume_dir / DATA_STATE_FILE).write_text(
        json.dumps({"step": resume.step, "data_states": resume.data_states}, indent=2, default=str)
    )
    return directory


def _legacy_numpy_globals() -> list[Any]:
    """numpy's array constructors, for state files whose RNG state is a numpy array (the format before the
    plain one). They build arrays of plain dtypes only; anything else in the file still fails to load."""
    try:
        from numpy._core import multiarray  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray

    return [multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_resume_state(directory: str | Path) -> ResumeState:
    """The resume state under `directory` (a checkpoint dir or its `resume/`).

    Read with `weights_only=True`: the file came from S3, so it may only hold tensors and plain values; a
    file that needs any other class or function (a pickle that would run code) raises `UnpicklingError`.
    """
    directory = Path(directory)
    path = directory / STATE_FILE if (directory / STATE_FILE).exists() else directory / RESUME_DIR / STATE_FILE
    with torch.serialization.safe_globals(_legacy_numpy_globals()):
        state = torch.load(path, map_location="cpu", weights_only=True)
    return ResumeState(**state)


def s3_client(settings: Settings):
    return settings.s3_client()


def checkpoint_prefix(run_name: str) -> str:
    return f"checkpoints/{run_name}"


def _is_precondition_failure(exc: Exception) -> bool:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    # 412: IfMatch / IfNoneMatch not met; 409: AWS's answer to two conditional writes racing on one key
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)


def _conflict(bucket: str, prefix: str, expected: LatestPointer, step_prefix: str) -> CheckpointConflictError:
    seen = f"the checkpoint at step {expected.ref.step}" if expected.ref else "no checkpoint"
    return CheckpointConflictError(
        f"s3://{bucket}/{prefix}/{LATEST_FILE} moved after this run read it ({seen}): another training run "
        f"advanced the lineage first; this run's checkpoint s3://{bucket}/{step_prefix}/ is not referenced"
    )


def _delete_quietly(s3, bucket: str, keys: list[str]) -> None:
    """Remove an unreferenced checkpoint's objects; a failure only leaves garbage behind."""
    try:
        for i in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]})
    except Exception as exc:  # noqa: BLE001 - best effort: nothing points at these objects
        log.warning("could not remove unreferenced checkpoint objects: %s", exc)


def new_step_prefix(prefix: str, step: int) -> str:
    """A fresh `<prefix>/step-<n>-<id>` for one upload: two invocations never write into the same folder."""
    return f"{prefix.strip('/')}/step-{step}-{uuid.uuid4().hex[:8]}"


def upload_files(s3, bucket: str, step_prefix: str, directory: str | Path, files: list[Path]) -> list[str]:
    """`files` (under `directory`) to `step_prefix`, at their paths below `directory`; returns their keys."""
    directory = Path(directory)
    keys = []
    for path in files:
        keys.append(f"{step_prefix}/{path.relative_to(directory).as_posix()}")
        s3.upload_file(str(path), bucket, keys[-1])
    return keys


def upload_checkpoint(
    s3,
    bucket: str,
    prefix: str,
    step: int,
    directory: str | Path,
    *,
    expected: LatestPointer,
    step_prefix: str | None = None,
    uploaded: tuple[str, ...] = (),
) -> LatestPointer:
    """Upload a local checkpoint to a fresh `s3://bucket/<prefix>/step-<n>-<id>/`, then move `latest.json`
    to it, conditionally on `latest.json` still being `expected` (what this invocation read or last wrote).

    A sharded checkpoint's other ranks uploaded their own files first: then `step_prefix` is the folder they
    wrote to, `uploaded` their keys, and `directory` holds none of their files.

    Returns the new pointer (pass it as `expected` to the next upload), also when the write raised but
    `latest.json` reads back as this upload (a lost answer). Raises `CheckpointConflictError` when another
    invocation moved `latest.json` since `expected`; the uploaded folder is then removed.
    """
    prefix = prefix.strip("/")
    step_prefix = step_prefix or new_step_prefix(prefix, step)
    latest_key = f"{prefix}/{LATEST_FILE}"
    if read_latest(s3, bucket, prefix).etag != expected.etag:  # fail fast, before uploading the weights
        _delete_quietly(s3, bucket, list(uploaded))
        raise _conflict(bucket, prefix, expected, step_prefix)
    files = sorted(p for p in Path(directory).rglob("*") if p.is_file())
    keys = [*uploaded, *upload_files(s3, bucket, step_prefix, directory, files)]
    ref = make_ref(bucket, step_prefix, step, datetime.now(timezone.utc).isoformat())
    condition = {"IfMatch": expected.etag} if expected.etag else {"IfNoneMatch": "*"}
    try:
        put = s3.put_object(
            Bucket=bucket,
            Key=latest_key,
            Body=json.dumps(asdict(ref)).encode(),
            ContentType="application/json",
            **condition,
        )
    except Exception as exc:  # noqa: BLE001 - settled by reading latest.json back
        return _settle_failed_write(s3, bucket, prefix, ref, keys, expected, exc)
    etag = put.get("ETag") or s3.head_object(Bucket=bucket, Key=latest_key)["ETag"]
    return LatestPointer(ref=ref, etag=etag)


def _settle_failed_write(
    s3, bucket: str, prefix: str, ref: CheckpointRef, keys: list[str], expected: LatestPointer, exc: Exception
) -> LatestPointer:
    """The conditional write of latest.json raised. It may still have been applied: botocore sends a write again
    when its answer was lost, and the server refuses the repeat (412) because latest.json already holds it. So
    read latest.json: naming `ref` (its fresh id) means this write won. Only when it names another checkpoint
    after a refused write is this upload removed; when it cannot be read, nothing is removed."""
    try:
        now = read_latest(s3, bucket, prefix)
    except Exception as read_exc:  # noqa: BLE001 - outcome unknown: keep the upload, report the write error
        log.warning("latest.json unreadable after a failed write (%s); keeping %s", read_exc, ref.uri)
        raise exc from None
    if now.ref == ref:
        log.warning("the write of latest.json -> %s raised %s, but it was applied: continuing", ref.uri, exc)
        return now
    if not _is_precondition_failure(exc):
        raise exc
    _delete_quietly(s3, bucket, keys)
    raise _conflict(bucket, prefix, expected, key_in_bucket(ref.uri, bucket).rstrip("/")) from exc


def download_prefix(s3, bucket: str, prefix: str, directory: str | Path) -> Path:
    """Every object under `s3://bucket/prefix/` into `directory`, at its key below the prefix.

    The whole listing is checked first: a key outside the prefix, or one whose rest is absolute, climbs with `..`
    or lands outside `directory` in any other way, raises `InvalidCheckpointError` and nothing is downloaded.
    """
    directory = Path(directory)
    prefix = prefix.strip("/") + "/"
    targets = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if key.endswith("/") and key.startswith(prefix):  # directory markers of filesystem-backed servers
                continue
            try:
                if not key.startswith(prefix):
                    raise UnsafeKeyError(f"key {key!r} is not under the listed prefix")
                targets.append((key, key_to_path(directory, key[len(prefix) :])))
            except UnsafeKeyError as exc:
                raise InvalidCheckpointError(f"refusing to download s3://{bucket}/{prefix}: {exc}") from None
    for key, target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(target))
    return directory


def load_latest(s3, bucket: str, prefix: str, directory: str | Path | None = None) -> LoadedCheckpoint | None:
    """Download the checkpoint `latest.json` points at into `directory` (a temp dir by default); None if none."""
    ref = latest_ref(s3, bucket, prefix)
    if ref is None:
        return None
    directory = Path(directory) if directory else Path(tempfile.mkdtemp(prefix=f"ckpt-step-{ref.step}-"))
    if directory.exists():
        shutil.rmtree(directory / HF_DIR, ignore_errors=True)
        shutil.rmtree(directory / RESUME_DIR, ignore_errors=True)
    step_prefix = key_in_bucket(ref.uri, bucket)
    download_prefix(s3, bucket, step_prefix, directory)
    return LoadedCheckpoint(ref=ref, hf_dir=directory / HF_DIR, resume=load_resume_state(directory))
