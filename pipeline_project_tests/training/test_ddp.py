from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_two_gloo_ranks_stay_in_lockstep(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(Path(__file__).with_name("ddp_worker.py")),
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # both ranks stop after 4 steps: rank 1 ran out; rank 0's fetched 5th batch stays unconsumed
    assert r0["steps"] == r1["steps"] == 4
    assert (r0["data_state"], r1["data_state"]) == (4, 4)
    assert r0["tokens"] == r1["tokens"] == 4 * 2 * 2 * 32  # global tokens: steps x ranks x batch x seq_len
    assert r0["losses"] == r1["losses"]  # the logged loss is the all-reduced mean
    assert r0["digest"] == r1["digest"]  # DDP kept the replicas identical
    assert r0["bias"] == r1["bias"] and any(b != 0 for b in r0["bias"])  # same global-load bias update
