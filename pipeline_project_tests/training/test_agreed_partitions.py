"""Every rank of a job lays out the same partition table (issue 37 finding 5): rank 0 reads the topic's partition
count and hands it on, so a topic grown while the job starts cannot give two ranks two tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_project.streaming.errors import StateError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.load.assignment import shares_for_rank
from pipeline_project.streaming.load.config import LoaderConfig
from pipeline_project.streaming.load.loader import agreed_partitions

REPO = Path(__file__).resolve().parents[2]


def test_two_ranks_that_list_a_growing_topic_apart_agree_on_rank_zeros_count():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    worker = Path(__file__).with_name("agree_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    counts = {r["rank"]: r["count"] for r in map(json.loads, proc.stdout.splitlines())}
    assert counts == {0: 4, 1: 4}


def test_the_agreed_count_gives_every_rank_one_table_without_overlap():
    cfg = [LoaderConfig(kafka=KafkaSettings(bootstrap_servers="k:1"), topic="t", seq_len=8, batch_size=1, rank=r,
                        world_size=2, partitions=4) for r in (0, 1)]  # fmt: skip
    tables = [agreed_partitions(c, tuple(range(4 + 2 * c.rank)), "id")[0] for c in cfg]  # rank 1 sees 6
    assert tables == [(0, 1, 2, 3), (0, 1, 2, 3)]
    shares = [shares_for_rank(t, rank=c.rank, world_size=2, num_workers=1) for t, c in zip(tables, cfg, strict=True)]
    read = [{s.partition for ss in by_worker.values() for s in ss} for by_worker in shares]
    assert read[0] & read[1] == set() and read[0] | read[1] == {0, 1, 2, 3}
    with pytest.raises(StateError, match="agreed on 4"):
        agreed_partitions(cfg[0], (0, 1, 2), "id")  # fewer than agreed: refused
