"""FSDP2 on gloo ranks: the sharded loop trains what DDP trains, a DDP checkpoint continues sharded, and a sharded
checkpoint resumes exactly at the same world size, at another one (3 ranks, and one process), and exports whole
HF weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from pipeline_project.training.trainer import inputs_and_labels
from pipeline_project_tests.training import fsdp_worker

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(fsdp_worker.__file__)
STEPS, SAVE_AT = 8, 4
# DDP and FSDP reduce gradients in another order, and DCP reshards at another world size: the losses agree to
# float32 rounding, far below the loss's own change over these steps (> 1.0)
TOLERANCE = 1e-4


def _torchrun(world: int, args: dict) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", str(WORKER)]
    proc = subprocess.run([*cmd, json.dumps(args)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _losses(out: Path, mode: str, world: int) -> list[dict[str, list[float]]]:
    return [json.loads((out / f"{mode}-w{world}-rank{r}.json").read_text()) for r in range(world)]


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= TOLERANCE for x, y in zip(a, b))


def test_fsdp_trains_as_ddp_does_and_its_checkpoint_resumes_at_any_world_size(tmp_path):
    args = {"out": str(tmp_path), "steps": STEPS, "save_at": SAVE_AT}
    _torchrun(2, {**args, "mode": "compare"})
    ranks = _losses(tmp_path, "compare", 2)
    assert ranks[0] == ranks[1]  # every rank logs the all-reduced loss
    ddp, fsdp, resumed = ranks[0]["ddp"], ranks[0]["fsdp"], ranks[0]["resumed"]
    assert len(ddp) == STEPS and ddp[0] - ddp[-1] > 1.0, ddp  # it learns: a wrong gradient would show
    assert _close(fsdp, ddp), (fsdp, ddp)
    assert _close(resumed, fsdp[SAVE_AT:]), (resumed, fsdp)  # same world size
    assert _close(ranks[0]["fsdp_from_ddp"], ddp[SAVE_AT:])  # a DDP lineage continues sharded, optimizer and all

    dcp_files = sorted(p.name for p in (tmp_path / "ckpt" / "resume" / "dcp").iterdir())
    assert dcp_files == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one shard per rank

    _torchrun(3, {**args, "mode": "resume"})  # resharded onto three ranks
    assert all(_close(r["resumed"], fsdp[SAVE_AT:]) for r in _losses(tmp_path, "resume", 3))
    fsdp_worker.main({**args, "mode": "resume"})  # and onto one unsharded process
    assert _close(_losses(tmp_path, "resume", 1)[0]["resumed"], fsdp[SAVE_AT:])

    # hf/ holds the whole model at the checkpoint's step: its loss on the next batch is the resumed run's first
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "hf")
    input_ids, labels = inputs_and_labels(fsdp_worker.learnable_batches(STEPS)[SAVE_AT])
    with torch.no_grad():
        loss = model(input_ids=input_ids, labels=labels, use_cache=False).loss.item()
    assert abs(loss - fsdp[SAVE_AT]) <= TOLERANCE
