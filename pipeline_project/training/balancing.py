"""DeepSeek-V3 auxiliary-loss-free expert load balancing.

Each MoE router adds `e_score_correction_bias` to the expert scores when choosing the top-k experts
(not when weighting them). After every optimizer step the bias of each expert moves by
`speed * sign(mean_load - load_i)`: overloaded experts become less attractive, idle ones more.
HF's DeepseekV3 code never updates that bias in training; this module does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter


@dataclass(frozen=True)
class ExpertLoad:
    """Per-router token counts of one step (summed over all ranks)."""

    counts: dict[str, list[int]]  # router name -> tokens routed to each expert

    @property
    def max_violation(self) -> float:
        """max_i load_i / mean_load - 1, worst router; 0 is perfect balance."""
        worst = 0.0
        for loads in self.counts.values():
            mean = sum(loads) / len(loads)
            if mean > 0:
                worst = max(worst, max(loads) / mean - 1.0)
        return worst

    def as_metrics(self) -> dict[str, float]:
        metrics = {"expert_load/max_violation": self.max_violation}
        for layer, loads in self.counts.items():
            total = sum(loads) or 1
            for expert, load in enumerate(loads):
                metrics[f"expert_load/{layer}/e{expert}"] = load / total
        return metrics


def _short_name(module_name: str) -> str:
    # "model.layers.3.mlp.gate" -> "layer3"
    parts = module_name.split(".")
    return f"layer{parts[parts.index('layers') + 1]}" if "layers" in parts else module_name


class ExpertBalancer:
    """Counts the top-k selections of every router through forward hooks and updates their biases."""

    def __init__(self, model: nn.Module, speed: float) -> None:
        self.speed = speed
        self.routers: dict[str, DeepseekV3TopkRouter] = {
            _short_name(name): module
            for name, module in model.named_modules()
            if isinstance(module, DeepseekV3TopkRouter)
        }
        self._counts = {
            name: torch.zeros(r.num_experts, dtype=torch.long, device=r.e_score_correction_bias.device)
            for name, r in self.routers.items()
        }
        self._handles = [r.register_forward_hook(self._hook(name)) for name, r in self.routers.items()]

    def _hook(self, name: str):
        def count_topk(module: DeepseekV3TopkRouter, _inputs, outputs) -> None:
            if not module.training:
                return
            topk_indices = outputs[2]
            self._counts[name] += torch.bincount(topk_indices.flatten(), minlength=module.num_experts)

        return count_topk

    @torch.no_grad()
    def step(self) -> ExpertLoad:
        """Apply the bias update from the loads counted since the last call, then reset the counts."""
        if not self.routers:
            return ExpertLoad({})
        names = list(self.routers)
        stacked = torch.stack([self._counts[n] for n in names])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(stacked)  # every rank applies the same update from the global load
        for name, loads in zip(names, stacked):
            bias = self.routers[name].e_score_correction_bias
            loads = loads.to(bias.device, torch.float32)
            bias.add_(self.speed * torch.sign(loads.mean() - loads))
            self._counts[name].zero_()
        return ExpertLoad({n: stacked[i].tolist() for i, n in enumerate(names)})

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
