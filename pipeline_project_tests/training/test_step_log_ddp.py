"""The provenance step log under DDP: rank 0's checkpoints hold every rank's blocks for each step, exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline_project.training.step_log import STEPS_FILE, runs_of
from pipeline_project_tests.training.step_log_worker import traces

REPO = Path(__file__).resolve().parents[2]


def test_two_gloo_ranks_write_both_ranks_blocks_of_every_step(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    worker = Path(__file__).with_name("step_log_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker)]
    proc = subprocess.run([*cmd, str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-3", "step-4"]
    first, last = (json.loads((tmp_path / d / STEPS_FILE).read_text()) for d in ("step-3", "step-4"))
    expected = [{str(i + 1): runs_of(t) for i, t in enumerate(traces(rank, 4))} for rank in (0, 1)]
    assert first["world_size"] == last["world_size"] == 2
    assert (first["first_step"], first["last_step"], last["first_step"], last["last_step"]) == (1, 3, 4, 4)
    assert first["ranks"] == [{s: r[s] for s in ("1", "2", "3")} for r in expected]
    assert last["ranks"] == [{"4": r["4"]} for r in expected]  # rank 0's fetched fifth batch was not trained
    assert first["ranks"][0]["2"] == [[0, 0, 2, 1], [0, 7, 0, 1]]  # a batch over two messages: two runs
