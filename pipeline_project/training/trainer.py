"""A readable pre-training loop for DeepseekV3 (torchtitan style): one config, one loop.

    for each batch: forward (bf16 autocast on CUDA) -> backward -> clip -> AdamW step -> expert-bias update

The caller owns the model, the optimizer and the batch iterator, so the same loop serves tests
(in-memory tensors), the Kafka loader, a fresh run and a resumed one. `TrainConfig` is declared in
`pipeline_project.training.config` (torch-free) and re-exported here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from pipeline_project.training.balancing import ExpertBalancer, ExpertLoad
from pipeline_project.training.config import TRAIN_CONFIG_VERSION, TrainConfig
from pipeline_project.training.distributed import all_reduce_scalar, is_distributed
from pipeline_project.training.sharding import is_sharded, scalar

__all__ = [
    "TRAIN_CONFIG_VERSION",
    "StepMetrics",
    "TrainConfig",
    "TrainResult",
    "build_optimizer",
    "inputs_and_labels",
    "lr_at",
    "seed_everything",
    "train",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepMetrics:
    step: int  # global step just completed (1-based)
    loss: float
    lr: float
    grad_norm: float
    tokens: int  # tokens trained this step, all ranks
    tokens_seen: int  # tokens trained in this invocation, all ranks
    tokens_per_s: float
    step_time_s: float
    data_wait_s: float
    data_wait_fraction: float  # time blocked on next(batches) / step time
    consumer_lag: float | None
    expert_load: ExpertLoad

    def as_metrics(self) -> dict[str, float]:
        metrics = {
            "loss": self.loss,
            "lr": self.lr,
            "grad_norm": self.grad_norm,
            "tokens_per_s": self.tokens_per_s,
            "tokens_seen": float(self.tokens_seen),
            "step_time_s": self.step_time_s,
            "data_wait_fraction": self.data_wait_fraction,
            **self.expert_load.as_metrics(),
        }
        if self.consumer_lag is not None:
            metrics["consumer_lag"] = self.consumer_lag
        return metrics


@dataclass
class TrainResult:
    start_step: int
    end_step: int
    tokens: int  # all ranks
    final_loss: float | None
    losses: list[float] = field(default_factory=list)
    stop_reason: Literal["max_steps", "data_exhausted"] = "data_exhausted"
    data_state: Any = None  # data_state_fn() at the position after the last trained batch

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to `lr`, cosine decay to `min_lr` at `decay_steps`, then flat. `step` is 0-based global."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if step >= cfg.decay_steps:
        return cfg.min_lr
    progress = (step - cfg.warmup_steps) / max(1, cfg.decay_steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on norms and other 1-D parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    on_cuda = next(model.parameters()).is_cuda
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=on_cuda or None)


IGNORE_INDEX = -100  # labels the loss skips (transformers' CrossEntropy ignore_index)


def inputs_and_labels(batch: torch.Tensor, pad_input_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Model inputs and labels of a [B, L] token batch whose padding is negative (the loader maps PAD to -1).

    Padding is only ever a block's tail, so under the causal mask it never influences a real token; its inputs
    become `pad_input_id` (any valid id) and its labels IGNORE_INDEX, so padding never counts in the loss.
    """
    pad = batch < 0
    return batch.masked_fill(pad, pad_input_id), batch.masked_fill(pad, IGNORE_INDEX)


def _pad_input_id(model: nn.Module) -> int:
    eos = getattr(getattr(model, "config", None), "eos_token_id", None)
    return eos if isinstance(eos, int) and eos >= 0 else 0


def _autocast(device: torch.device, sharded: bool):
    """bf16 autocast on CUDA for an unsharded model; a sharded one computes in bf16 by its own policy."""
    if device.type == "cuda" and not sharded:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class _StepOutput:
    """What one optimizer step left on this rank (the loss and labels are reduced across ranks afterwards)."""

    lr: float
    loss: torch.Tensor
    labels: torch.Tensor
    grad_norm: float
    expert_load: ExpertLoad


@dataclass
class _Loop:
    """The parts of a training invocation that every step uses."""

    cfg: TrainConfig
    model: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    distributed: bool

    def __post_init__(self) -> None:
        self.is_main = not self.distributed or torch.distributed.get_rank() == 0
        ids = [self.device.index] if self.device.type == "cuda" else None
        replicate = self.distributed and not is_sharded(self.model)  # a sharded model reduces its own gradients
        self.net: nn.Module = DistributedDataParallel(self.model, device_ids=ids) if replicate else self.model
        self.balancer = ExpertBalancer(self.model, self.cfg.bias_update_speed)
        self.pad_input_id = _pad_input_id(self.model)

    def optimizer_step(self, step: int, batch: torch.Tensor) -> _StepOutput:
        """Forward, backward, clip, AdamW step and expert-bias update at the learning rate of 0-based `step`."""
        lr = lr_at(step, self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        input_ids, labels = inputs_and_labels(batch.to(self.device, non_blocking=True), self.pad_input_id)
        with _autocast(self.device, is_sharded(self.model)):
            loss = self.net(input_ids=input_ids, labels=labels, use_cache=False).loss
        loss.backward()
        grad_norm = scalar(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return _StepOutput(lr, loss, labels, grad_norm, self.balancer.step())

    def reduce(self, out: _StepOutput) -> tuple[float, int]:
        """The step's mean loss and its real (unpadded) tokens, over all ranks."""
        world = torch.distributed.get_world_size() if self.distributed else 1
        loss_value = all_reduce_scalar(out.loss.item(), "sum", self.device) / world
        real_tokens = out.labels.numel() - int((out.labels == IGNORE_INDEX).sum())  # padding does not count
        return loss_value, int(all_reduce_scalar(float(real_tokens), "sum", self.device))

    def report(self, metrics: StepMetrics, on_step: Callable[[StepMetrics], None] | None) -> None:
        if not self.is_main:
            return
        log.info(
            "step %d loss %.4f lr %.2e %.0f tok/s data-wait %.1f%% expert imbalance %.2f",
            metrics.step,
            metrics.loss,
            metrics.lr,
            metrics.tokens_per_s,
            100 * metrics.data_wait_fraction,
            metrics.expert_load.max_violation,
        )
        if on_step:
            on_step(metrics)


def _step_metrics(
    step: int,
    out: _StepOutput,
    loss_value: float,
    step_tokens: int,
    tokens_seen: int,
    times: tuple[float, float],
    lag: float | None,
) -> StepMetrics:
    step_time, data_wait = times
    return StepMetrics(
        step=step,
        loss=loss_value,
        lr=out.lr,
        grad_norm=out.grad_norm,
        tokens=step_tokens,
        tokens_seen=tokens_seen,
        tokens_per_s=step_tokens / step_time,
        step_time_s=step_time,
        data_wait_s=data_wait,
        data_wait_fraction=data_wait / step_time,
        consumer_lag=lag,
        expert_load=out.expert_load,
    )


def train(
    cfg: TrainConfig,
    batches: Iterable[torch.Tensor],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    start_step: int = 0,
    on_step: Callable[[StepMetrics], None] | None = None,
    lag_fn: Callable[[], float | None] | None = None,
    data_state_fn: Callable[[], Any] | None = None,
    on_checkpoint: Callable[[int, Any], None] | None = None,
) -> TrainResult:
    """Train on `batches` ([B, L] token ids) until `cfg.max_steps` or the data ends.

    Under DDP every rank calls this; the loop stops as soon as any rank runs out of data, and
    `on_step` runs on rank 0 only; `on_checkpoint(step, data_state)` runs on every rank (it may gather
    the data states of all ranks before rank 0 saves).
    `data_state_fn` snapshots the data position (e.g. the loader's state_dict) so the result and
    each checkpoint record exactly the batches that were trained on.
    """
    device = next(model.parameters()).device
    loop = _Loop(cfg, model, optimizer, device, is_distributed())
    snapshot = data_state_fn or (lambda: None)
    iterator: Iterator[torch.Tensor] = iter(batches)
    result = TrainResult(start_step=start_step, end_step=start_step, tokens=0, final_loss=None)
    model.train()
    step = start_step
    try:
        while cfg.max_steps is None or step - start_step < cfg.max_steps:
            data_state = snapshot()
            t0 = time.perf_counter()
            batch = next(iterator, None)
            data_wait = time.perf_counter() - t0
            # Every rank must take the same number of steps or the collectives hang.
            if all_reduce_scalar(0.0 if batch is None else 1.0, "min", device) == 0.0:
                result.data_state = data_state  # a fetched-but-untrained batch is not consumed
                result.stop_reason = "data_exhausted"
                break
            out = loop.optimizer_step(step, batch)
            step += 1
            loss_value, step_tokens = loop.reduce(out)
            step_time = time.perf_counter() - t0
            result.tokens += step_tokens
            result.losses.append(loss_value)
            result.final_loss = loss_value
            result.end_step = step
            is_last = cfg.max_steps is not None and step - start_step >= cfg.max_steps
            if step % cfg.log_every == 0 or is_last:
                lag = _global_lag(lag_fn, device)
                times = (step_time, data_wait)
                loop.report(_step_metrics(step, out, loss_value, step_tokens, result.tokens, times, lag), on_step)
            if on_checkpoint and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                on_checkpoint(step, snapshot())
        else:
            result.stop_reason = "max_steps"
            result.data_state = snapshot()
    finally:
        loop.balancer.close()
    return result


def _global_lag(lag_fn: Callable[[], float | None] | None, device: torch.device) -> float | None:
    lag = lag_fn() if lag_fn else None
    return None if lag is None else all_reduce_scalar(float(lag), "sum", device)
