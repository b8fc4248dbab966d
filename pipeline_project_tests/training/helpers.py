"""Shared helpers of the training tests."""

from __future__ import annotations

import torch

from pipeline_project.training.presets import ModelPreset
from pipeline_project.training.trainer import TrainConfig

# The training loop does not care about the vocabulary; a small one keeps CPU steps fast.
# Tests that touch tokenizer files or generation use the real DeepSeek vocabulary.
SMALL_VOCAB = 512


def tiny_config(**overrides) -> TrainConfig:
    base = dict(
        preset=ModelPreset(name="tiny"),
        lr=3e-3,
        min_lr=3e-4,
        warmup_steps=2,
        decay_steps=50,
        batch_size=2,
        seed=0,
        bias_update_speed=1e-2,
        device="cpu",
    )
    return TrainConfig(**{**base, **overrides})


def make_batches(n: int, *, vocab: int = SMALL_VOCAB, batch_size: int = 2, seq_len: int = 32, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch_size, seq_len), generator=g) for _ in range(n)]
