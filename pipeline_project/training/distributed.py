"""torchrun / DDP plumbing: process-group setup from the torchrun environment and small collectives.

The process's place in the job comes from `settings.DistEnv` (RANK, WORLD_SIZE, LOCAL_RANK). Every
collective here is a no-op returning the local value when no process group is up, so the same code runs
as one plain process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from pipeline_project.settings import DistEnv


@dataclass(frozen=True)
class DistInfo(DistEnv):
    """The torchrun place of this process, once its process group is up."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed() -> DistInfo:
    """Join the process group torchrun describes (WORLD_SIZE > 1): NCCL on CUDA, gloo on CPU."""
    env = DistEnv.from_env()
    if env.world_size <= 1:
        return DistInfo()
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(env.local_rank)
            dist.init_process_group("nccl", device_id=torch.device("cuda", env.local_rank))
        else:
            dist.init_process_group("gloo")
    return DistInfo(rank=env.rank, world_size=env.world_size, local_rank=env.local_rank)


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_scalar(value: float, op: str = "sum", device: torch.device | str = "cpu") -> float:
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op])
    return tensor.item()


def all_gather_objects(obj: Any) -> list[Any]:
    """obj from every rank, in rank order (a one-element list when not distributed)."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
