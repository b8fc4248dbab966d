"""Sharded data parallelism with PyTorch's own FSDP2 (`fully_shard`) and its sharded checkpoints
(`torch.distributed.checkpoint`, DCP).

`TrainConfig.parallelism = "fsdp"` on more than one rank: every decoder layer and then the whole model are sharded,
so each rank holds 1/world of the parameters, gradients and AdamW state (torchtitan's recipe). On CUDA the
parameters compute in bf16 and gradients reduce in fp32 (`MixedPrecisionPolicy`); the fp32 master weights and the
optimizer state stay sharded in fp32. On CPU (gloo, the tests) everything stays fp32.

A sharded checkpoint keeps the model and optimizer state as DCP files under `resume/dcp/`: each rank writes its
own `__<rank>_<n>.distcp`, rank 0 the `.metadata` that maps them to global tensors, so a lineage resumes at any
world size (DCP reshards on load) and under DDP as well. `hf/` holds the whole model, gathered on rank 0, so
the HF folder and MLflow's model read the same weights as a DDP checkpoint's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

DCP_DIR = "dcp"  # under the checkpoint's resume/
METADATA_FILE = ".metadata"


def shard_model(model: nn.Module, device: torch.device) -> nn.Module:
    """Shard every decoder layer, then the root (embeddings, final norm, LM head), in place."""
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if device.type == "cuda"
        else MixedPrecisionPolicy()
    )
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__} has no `model.layers` to shard layer by layer")
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def scalar(value: torch.Tensor) -> float:
    """A reduced value as a float; a sharded model's gradient norm is a DTensor whose full value needs a gather."""
    if isinstance(value, DTensor):
        value = value.full_tensor()
    return float(value)


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on rank 0, on CPU (a collective: every rank calls; the others get `{}`)."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def dcp_dir(resume_dir: Path) -> Path:
    return Path(resume_dir) / DCP_DIR


def has_sharded_state(resume_dir: Path) -> bool:
    return (dcp_dir(resume_dir) / METADATA_FILE).is_file()


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, resume_dir: Path) -> list[Path]:
    """Write the model and optimizer state as DCP files under `resume_dir/dcp/` (a collective: every rank
    calls, each with the `resume_dir` of its node). Returns the files this rank wrote, which it uploads."""
    target = dcp_dir(resume_dir)
    target.mkdir(parents=True, exist_ok=True)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(target))
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    mine = sorted(target.glob(f"__{rank}_*.distcp"))
    if rank == 0:
        mine.append(target / METADATA_FILE)
    return mine


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, resume_dir: Path) -> None:
    """Read `resume_dir/dcp/` into `model` and `optimizer`, sharded or not, at this job's world size."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(dcp_dir(resume_dir)))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """An unsharded checkpoint's `optimizer.state_dict()` (parameters numbered in the optimizer's order) into the
    optimizer of a sharded `model`: a DDP lineage continued with FSDP."""
    names = {id(param): name for name, param in model.named_parameters()}
    order = [names[id(param)] for group in optimizer.param_groups for param in group["params"]]
    by_name = {
        "state": {order[index]: value for index, value in saved["state"].items()},
        "param_groups": [
            {**group, "params": [order[index] for index in group["params"]]} for group in saved["param_groups"]
        ],
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


def unsharded_copy(model: nn.Module, weights: dict[str, torch.Tensor]) -> nn.Module:
    """A plain CPU model of `model`'s architecture holding `weights` (the gathered state), for MLflow's logger."""
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_config(model.config)
    plain.load_state_dict(weights)
    return plain
