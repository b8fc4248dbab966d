"""Checkpoints: an HF-format model (safetensors + tokenizer files) and the resume state, local and in S3.

Layout, locally under one directory and in S3 under `checkpoints/<run_name>/step-<n>/`:

    hf/       config.json, model.safetensors, generation_config.json, tokenizer files
    resume/   state.pt (optimizer, step, tokens, RNG, data-loader states of all ranks)
              data_state.json (the same loader states, readable: per-partition Kafka offsets)

`checkpoints/<run_name>/latest.json` points at the newest complete step; it is written last, so a
crash mid-upload leaves the previous checkpoint current. A save that writes no safetensors raises
`CheckpointWriteError` before anything is uploaded.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from pipeline_project.settings import Settings
from pipeline_project.training.errors import CheckpointWriteError

HF_DIR = "hf"
RESUME_DIR = "resume"
STATE_FILE = "state.pt"
DATA_STATE_FILE = "data_state.json"
LATEST_FILE = "latest.json"


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
class CheckpointRef:
    step: int
    uri: str  # s3://bucket/checkpoints/<run>/step-<n>/
    hf_uri: str
    resume_uri: str
    created_at: str


@dataclass(frozen=True)
class LoadedCheckpoint:
    ref: CheckpointRef
    hf_dir: Path
    resume: ResumeState


def capture_rng() -> dict[str, Any]:
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    if "python" in rng:
        random.setstate(rng["python"])
    if "numpy" in rng:
        np.random.set_state(rng["numpy"])
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def save_checkpoint(
    directory: str | Path, *, model: nn.Module, tokenizer: SavesTokenizer | None, resume: ResumeState
) -> Path:
    """Write `hf/` and `resume/` under `directory` (pass the unwrapped model, not the DDP wrapper)."""
    directory = Path(directory)
    hf_dir, resume_dir = directory / HF_DIR, directory / RESUME_DIR
    hf_dir.mkdir(parents=True, exist_ok=True)
    resume_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(hf_dir)  # safetensors is the only format transformers 5 writes
    if not (hf_dir / "model.safetensors").exists() and not (hf_dir / "model.safetensors.index.json").exists():
        raise CheckpointWriteError(f"save_pretrained wrote no safetensors into {hf_dir}")
    if tokenizer is not None:
        tokenizer.save(hf_dir)
    torch.save(asdict(resume), resume_dir / STATE_FILE)
    (resume_dir / DATA_STATE_FILE).write_text(
        json.dumps({"step": resume.step, "data_states": resume.data_states}, indent=2, default=str)
    )
    return directory


def load_resume_state(directory: str | Path) -> ResumeState:
    """The resume state under `directory` (a checkpoint dir or its `resume/`). Trusted input: our own files."""
    directory = Path(directory)
    path = directory / STATE_FILE if (directory / STATE_FILE).exists() else directory / RESUME_DIR / STATE_FILE
    return ResumeState(**torch.load(path, map_location="cpu", weights_only=False))


def s3_client(settings: Settings | None = None):
    return (settings or Settings()).s3_client()


def checkpoint_prefix(run_name: str) -> str:
    return f"checkpoints/{run_name}"


def upload_checkpoint(s3, bucket: str, prefix: str, step: int, directory: str | Path) -> CheckpointRef:
    """Upload a local checkpoint to `s3://bucket/<prefix>/step-<n>/` and then move `latest.json` to it."""
    directory = Path(directory)
    prefix = prefix.strip("/")
    step_prefix = f"{prefix}/step-{step}"
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, f"{step_prefix}/{path.relative_to(directory).as_posix()}")
    ref = CheckpointRef(
        step=step,
        uri=f"s3://{bucket}/{step_prefix}/",
        hf_uri=f"s3://{bucket}/{step_prefix}/{HF_DIR}/",
        resume_uri=f"s3://{bucket}/{step_prefix}/{RESUME_DIR}/",
        created_at=datetime.now(timezone.utc).isoformat(),
    )
    s3.put_object(
        Bucket=bucket,
        Key=f"{prefix}/{LATEST_FILE}",
        Body=json.dumps(asdict(ref)).encode(),
        ContentType="application/json",
    )
    return ref


def latest_ref(s3, bucket: str, prefix: str) -> CheckpointRef | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=f"{prefix.strip('/')}/{LATEST_FILE}")["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return CheckpointRef(**json.loads(body))


def download_prefix(s3, bucket: str, prefix: str, directory: str | Path) -> Path:
    directory = Path(directory)
    prefix = prefix.strip("/") + "/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("/"):  # directory markers of filesystem-backed S3 servers
                continue
            target = directory / obj["Key"][len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(target))
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
    step_prefix = ref.uri.removeprefix(f"s3://{bucket}/")
    download_prefix(s3, bucket, step_prefix, directory)
    return LoadedCheckpoint(ref=ref, hf_dir=directory / HF_DIR, resume=load_resume_state(directory))
