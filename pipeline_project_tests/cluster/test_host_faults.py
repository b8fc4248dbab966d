"""Host faults under multi-node training on the cluster: a trainer node killed mid-run (`cluster kill trainer-2`).

Counted by position and content hash of every block, with the recovery seconds printed (docs/cluster.md).
"""

from __future__ import annotations

import time
import uuid

import pytest

from pipeline_project.training.checkpoint.store import read_latest, s3_client
from pipeline_project_harness.cluster import multinode as mn

pytestmark = pytest.mark.cluster
HOSTS = ["trainer-1", "trainer-2"]


@pytest.fixture(scope="session")
def deepseek_tokenizer():
    from pipeline_project.streaming.tokenizer import load_tokenizer

    return load_tokenizer()


def _wait_for_checkpoint(cluster, prefix: str, runs: list[mn.NodeRun], timeout: float = 300) -> int:
    s3, bucket = s3_client(cluster.settings()), cluster.settings().bucket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ref = read_latest(s3, bucket, prefix).ref
        if ref is not None:
            return ref.step
        assert all(r.proc.poll() is None for r in runs), "the run ended before its first checkpoint"
        time.sleep(0.5)
    raise AssertionError("no mid-run checkpoint")


def test_trainer_node_killed_mid_run_retry_continues_from_last_checkpoint(cluster, deepseek_tokenizer, tmp_path):
    topic, prefix = f"fault-{uuid.uuid4().hex[:6]}", f"checkpoints/fault-{uuid.uuid4().hex[:6]}"
    mn.produce(cluster, topic, 120, deepseek_tokenizer)
    blocks = mn.topic_blocks(cluster, topic)
    job = mn.job(cluster, topic, prefix, max_steps=None, checkpoint_every=2)

    first = mn.launch(job, HOSTS, f"fault-a-{uuid.uuid4().hex[:6]}", tmp_path)
    saved_step = _wait_for_checkpoint(cluster, prefix, first)
    killed_at = time.monotonic()
    assert mn.cli_kill("trainer-2") == 0
    codes = [r.proc.wait(timeout=300) for r in first]
    detected_s = time.monotonic() - killed_at
    assert codes[1] == 128 + 9 and codes[0] != 0, codes  # the survivor's job fails instead of hanging

    retry = mn.wait(mn.launch(job, HOSTS, f"fault-b-{uuid.uuid4().hex[:6]}", tmp_path))
    recovered_s = time.monotonic() - killed_at
    print(f"\nkill trainer-2 after checkpoint step {saved_step}: survivor failed in {detected_s:.0f} s, "
          f"retry finished {recovered_s:.0f} s after the kill")  # fmt: skip
    resumed = read_latest(s3_client(cluster.settings()), cluster.settings().bucket, prefix).ref
    assert retry["resumed_from"] is not None and retry["start_step"] >= saved_step >= 2
    assert resumed.step == retry["end_step"] == retry["start_step"] + retry["steps"]
    # the lineage's checkpoints saw every block once: up to the checkpoint the killed run saved, then the retry's
    before = [h for p, part in blocks.items() for h in mn.trained_slice(part, None, retry["start_position"].get(p))]
    after = [
        h
        for p, part in blocks.items()
        for h in mn.trained_slice(part, retry["start_position"].get(p), retry["end_position"].get(p, {"offset": 0}))
    ]
    assert len(before) == retry["start_step"] * mn.BATCH * 4 and len(after) == retry["steps"] * mn.BATCH * 4
    assert len(set(before + after)) == len(before) + len(after)
    # bounded mode ends when a rank has less than a batch left: the rank of the fullest-read partition
    left = {
        p: len(part) - len(mn.trained_slice(part, None, retry["end_position"].get(p))) for p, part in blocks.items()
    }
    assert min(left.values()) < mn.BATCH, left
