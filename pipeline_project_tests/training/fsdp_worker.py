"""Run by torchrun in test_fsdp.py (or in-process for one rank): train the tiny model on global batches of 6
sequences, each rank its slice, with DDP and with FSDP2, and resume a sharded checkpoint.

argv[1]: JSON {"out": dir, "mode": "compare" | "resume", "steps": n, "save_at": k}.
- compare: DDP for n steps saving a checkpoint at step k into out/ddp-ckpt, then FSDP for n steps saving one into
  out/ckpt, then FSDP resumed from the DDP checkpoint, then (same world size) a fresh FSDP state resumed from the
  sharded checkpoint, each training steps k..n again.
- resume: a fresh state at this world size resumed from out/ckpt trains steps k..n.
Each rank writes out/<mode>-w<world>-rank<r>.json with the losses of every run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from pipeline_project.training import distributed
from pipeline_project.training.checkpoint.store import save_checkpoint
from pipeline_project.training.resume import build_training_state, make_resume_state
from pipeline_project.training.sharding import full_model_state, is_sharded, save_sharded
from pipeline_project.training.trainer import train
from pipeline_project_tests.training.helpers import SMALL_VOCAB, tiny_config

GLOBAL_BATCH = 6


def learnable_batches(steps: int, seq_len: int = 32) -> list[torch.Tensor]:
    """Counting sequences from random starts: the loss falls within a few steps, so a wrong gradient shows."""
    g = torch.Generator().manual_seed(7)
    starts = torch.randint(0, SMALL_VOCAB, (steps, GLOBAL_BATCH, 1), generator=g)
    return list((starts + torch.arange(seq_len)) % 64)


def my_slices(batches: list[torch.Tensor], info: distributed.DistInfo) -> list[torch.Tensor]:
    per_rank = GLOBAL_BATCH // info.world_size
    return [b[info.rank * per_rank : (info.rank + 1) * per_rank] for b in batches]


def save(state, step: int, directory: Path, info: distributed.DistInfo) -> None:
    """A DDP model's checkpoint as rank 0 writes it; a sharded one's with every rank's DCP shard."""
    weights = None
    if is_sharded(state.model):
        weights = full_model_state(state.model)
        save_sharded(state.model, state.optimizer, directory / "resume")
    if info.is_main:
        resume = make_resume_state(state, step, 0, [], meta={})
        save_checkpoint(directory, model=state.model, tokenizer=None, resume=resume, weights=weights)
    distributed.barrier()


def run(parallelism: str, batches, info, *, checkpoint_dir=None, save_at=None, out=None) -> list[float]:
    cfg = tiny_config(parallelism=parallelism, batch_size=GLOBAL_BATCH // info.world_size)
    shard = parallelism == "fsdp" and info.enabled
    state = build_training_state(cfg, SMALL_VOCAB, torch.device("cpu"), checkpoint_dir=checkpoint_dir, shard=shard)
    batches = batches[state.step :]
    on_checkpoint = None
    if save_at:
        cfg = cfg.model_copy(update={"checkpoint_every": save_at})
        on_checkpoint = lambda step, _: save(state, step, out, info) if step == save_at else None  # noqa: E731
    result = train(
        cfg, my_slices(batches, info), model=state.model, optimizer=state.optimizer,
        start_step=state.step, on_checkpoint=on_checkpoint,
    )  # fmt: skip
    return result.losses


def main(args: dict) -> None:
    info = distributed.init_distributed()
    out, steps, save_at = Path(args["out"]), args["steps"], args["save_at"]
    batches = learnable_batches(steps)
    losses = {}
    if args["mode"] == "compare":
        losses["ddp"] = run("ddp", batches, info, save_at=save_at, out=out / "ddp-ckpt")
        losses["fsdp"] = run("fsdp", batches, info, save_at=save_at, out=out / "ckpt")
        losses["fsdp_from_ddp"] = run("fsdp", batches, info, checkpoint_dir=out / "ddp-ckpt")
    losses["resumed"] = run("fsdp", batches, info, checkpoint_dir=out / "ckpt")
    (out / f"{args['mode']}-w{info.world_size}-rank{info.rank}.json").write_text(json.dumps(losses))
    distributed.destroy()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
