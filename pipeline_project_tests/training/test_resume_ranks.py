"""Which checkpoint a multi-rank job continues from: rank 0 reads latest.json once and hands the reference to every
rank; each node's local rank 0 downloads it into that node's own scratch directory. Two torchrun "nodes" on this
machine (c10d rendezvous, gloo): node 0 with two ranks, node 1 with one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pipeline_project.training.checkpoint.store import (
    ResumeState,
    read_latest,
    s3_client,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.presets import build_model
from pipeline_project.training.trainer import build_optimizer, seed_everything
from pipeline_project_tests.training.helpers import tiny_config

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.stack


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_two_nodes(args: dict, tmp_path: Path) -> list[subprocess.Popen]:
    port, run_id = _free_port(), uuid.uuid4().hex[:8]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    procs = []
    for node, nproc in ((0, 2), (1, 1)):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={nproc}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
               f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}",
               str(Path(__file__).with_name("resume_worker.py")), json.dumps(args)]  # fmt: skip
        log = open(tmp_path / f"node{node}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(cmd, cwd=REPO, env={**env, "TMPDIR": str(tmp_path)}, stdout=log, stderr=log))
    return procs


def test_rank_0_reads_latest_json_once_and_every_node_downloads_that_checkpoint(stack, tmp_path, deepseek_tokenizer):
    s3 = s3_client(stack)
    prefix = f"checkpoints/test-ranks-{uuid.uuid4().hex[:8]}"
    seed_everything(0)
    model, cfg = build_model("tiny", deepseek_tokenizer.vocab_size), tiny_config()
    local = save_checkpoint(
        tmp_path / "local", model=model, tokenizer=deepseek_tokenizer,
        resume=ResumeState(step=5, tokens_seen=320, optimizer=build_optimizer(model, cfg).state_dict(),
                           data_states=[], meta={"tokenizer_hash": deepseek_tokenizer.hash}),
    )  # fmt: skip
    written = upload_checkpoint(s3, stack.bucket, prefix, 5, local, expected=read_latest(s3, stack.bucket, prefix))
    out = tmp_path / "out"
    out.mkdir()
    args = {"s3_endpoint": stack.s3_endpoint, "bucket": stack.bucket, "prefix": prefix, "out": str(out)}
    procs = _launch_two_nodes(args, tmp_path)
    codes = [p.wait(timeout=300) for p in procs]
    logs = "\n".join((tmp_path / f"node{n}.log").read_text()[-3000:] for n in (0, 1))
    assert codes == [0, 0], logs

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    assert [r["latest_reads"] for r in ranks] == [1, 0, 0]  # read once, by rank 0
    assert all(r["previous"] == ranks[0]["previous"] and r["etag"] == written.etag for r in ranks)
    assert ranks[0]["previous"]["uri"] == written.ref.uri and {r["step"] for r in ranks} == {5}
    # one download per node, each into that node's own directory, each byte for byte what was uploaded
    assert ranks[0]["work_dir"] == ranks[1]["work_dir"] != ranks[2]["work_dir"]
    assert [r["downloads"] > 0 for r in ranks] == [True, False, True]
    want = {k: v for k, v in _digests(local).items()}
    for r in (ranks[0], ranks[2]):
        (files,) = r["files"].values()
        assert files == want


def _digests(directory: Path) -> dict[str, str]:
    import hashlib

    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
