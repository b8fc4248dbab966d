"""Build the model + optimizer for an invocation: fresh from a preset, or continued from a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from pipeline_project.training.checkpoint.store import (
    HF_DIR,
    RESUME_DIR,
    ResumeState,
    capture_rng,
    load_resume_state,
    restore_rng,
)
from pipeline_project.training.presets import assert_vocab_fits, build_model
from pipeline_project.training.sharding import (
    has_sharded_state,
    is_sharded,
    load_full_optimizer_state,
    load_sharded,
    shard_model,
)
from pipeline_project.training.trainer import TrainConfig, build_optimizer, seed_everything


@dataclass
class TrainingState:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    step: int = 0
    tokens_seen: int = 0
    data_states: list[Any] = field(default_factory=list)  # loader states of all ranks, [] when fresh
    resumed_from: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # the checkpoint's ResumeState.meta


def build_training_state(
    cfg: TrainConfig,
    vocab_size: int,
    device: torch.device,
    checkpoint_dir: str | Path | None = None,
    *,
    shard: bool = False,
) -> TrainingState:
    """A fresh model from `cfg.preset`, or the weights, optimizer, step, RNG and data position of a checkpoint.

    `shard`: the model is sharded with FSDP2 (`sharding.shard_model`) before its optimizer is built. A checkpoint
    with sharded state (`resume/dcp/`) loads into either layout at any world size; one without loads its weights
    from `hf/` and its optimizer from `state.pt`, also into a sharded model."""
    seed_everything(cfg.seed)
    if checkpoint_dir is None:
        model = _placed(build_model(cfg.preset, vocab_size), device, shard)
        return TrainingState(model=model, optimizer=build_optimizer(model, cfg))

    checkpoint_dir = Path(checkpoint_dir)
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir / HF_DIR, dtype=torch.float32)
    assert_vocab_fits(model.config, vocab_size)
    model = _placed(model, device, shard)
    optimizer = build_optimizer(model, cfg)
    resume = load_resume_state(checkpoint_dir)
    resume_dir = checkpoint_dir / RESUME_DIR
    if has_sharded_state(resume_dir):
        load_sharded(model, optimizer, resume_dir)
    elif shard:
        load_full_optimizer_state(model, optimizer, resume.optimizer)
    else:
        optimizer.load_state_dict(resume.optimizer)
    restore_rng(resume.rng)
    return TrainingState(
        model=model,
        optimizer=optimizer,
        step=resume.step,
        tokens_seen=resume.tokens_seen,
        data_states=resume.data_states,
        resumed_from=checkpoint_dir,
        meta=resume.meta,
    )


def _placed(model: nn.Module, device: torch.device, shard: bool) -> nn.Module:
    model = model.to(device)
    return shard_model(model, device) if shard else model


def make_resume_state(
    state: TrainingState, step: int, tokens_seen: int, data_states: list[Any], meta: dict[str, Any] | None = None
) -> ResumeState:
    return ResumeState(
        step=step,
        tokens_seen=tokens_seen,
        optimizer={} if is_sharded(state.model) else state.optimizer.state_dict(),  # a sharded one is in resume/dcp/
        data_states=data_states,
        rng=capture_rng(),
        meta=meta or {},
    )
