"""Build the model + optimizer for an invocation: fresh from a preset, or continued from a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from pipeline_project.training.checkpoint.store import HF_DIR, ResumeState, capture_rng, load_resume_state, restore_rng
from pipeline_project.training.presets import assert_vocab_fits, build_model
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
    cfg: TrainConfig, vocab_size: int, device: torch.device, checkpoint_dir: str | Path | None = None
) -> TrainingState:
    """A fresh model from `cfg.preset`, or the weights, optimizer, step, RNG and data position of a checkpoint."""
    seed_everything(cfg.seed)
    if checkpoint_dir is None:
        model = build_model(cfg.preset, vocab_size).to(device)
        return TrainingState(model=model, optimizer=build_optimizer(model, cfg))

    checkpoint_dir = Path(checkpoint_dir)
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir / HF_DIR, dtype=torch.float32).to(device)
    assert_vocab_fits(model.config, vocab_size)
    optimizer = build_optimizer(model, cfg)
    resume = load_resume_state(checkpoint_dir)
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


def make_resume_state(
    state: TrainingState, step: int, tokens_seen: int, data_states: list[Any], meta: dict[str, Any] | None = None
) -> ResumeState:
    return ResumeState(
        step=step,
        tokens_seen=tokens_seen,
        optimizer=state.optimizer.state_dict(),
        data_states=data_states,
        rng=capture_rng(),
        meta=meta or {},
    )
