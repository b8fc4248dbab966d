"""Two gloo ranks under torchrun read disjoint blocks whose union is the whole range.

This file is also the per-rank script: the test launches
`python -m torch.distributed.run --nproc_per_node 2 test_ddp.py ...`, and each rank writes its
traces and gathered states to a JSON file.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

BATCH = 3
RESUME_AFTER = 2


def _rank_main(bootstrap: str, topic: str, out_dir: str) -> None:
    import torch.distributed as dist

    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig, gather_state
    from pipeline_project_tests.streaming.test_loader_support import SEQ_LEN

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # rank and world_size come from torchrun's RANK / WORLD_SIZE
    cfg = LoaderConfig(
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
        topic=topic,
        seq_len=SEQ_LEN,
        batch_size=BATCH,
        num_workers=2,
        trace=True,
        seed=5,
    )
    assert (cfg.rank, cfg.world_size) == (rank, 2)

    full = KafkaBlockLoader(cfg)
    n_full = sum(1 for _ in full)
    full_trace = list(full.trace)
    full.close()

    head = KafkaBlockLoader(cfg)
    for i, _ in enumerate(head, 1):
        if i == RESUME_AFTER:
            break
    states = json.loads(json.dumps(gather_state(head)))  # every rank's state, as in a checkpoint
    head_trace = list(head.trace)
    head.close()

    tail = KafkaBlockLoader(cfg)
    tail.load_state_dict(states)
    for _ in tail:
        pass
    tail_trace = list(tail.trace)
    tail.close()

    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "n_full": n_full,
                "full": full_trace,
                "head": head_trace,
                "tail": tail_trace,
                "states": states,
                "partitions": list(full.partitions),
            }
        )
    )
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.stack
def test_two_gloo_ranks_read_disjoint_blocks_covering_everything(stack, tmp_path):
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project_tests.streaming.test_loader_support import make_topic, produce

    kafka = KafkaSettings.from_settings(stack)
    data = make_topic(kafka, 4)
    produce(kafka, data, 5, seed=21)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        __file__,
        stack.kafka_bootstrap,
        data.topic,
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    traces = [{tuple(k) for k in r["full"]} for r in ranks]
    assert traces[0] and traces[1]
    assert not traces[0] & traces[1]
    assert set(ranks[0]["partitions"]).isdisjoint(ranks[1]["partitions"])
    assert sorted(ranks[0]["partitions"] + ranks[1]["partitions"]) == [0, 1, 2, 3]
    everything = set(data.blocks)
    union = traces[0] | traces[1]
    assert union <= everything
    # only each rank's dropped short last batch may be missing
    assert len(everything - union) < 2 * BATCH
    for r in ranks:
        assert len(r["full"]) == r["n_full"] * BATCH
        # the gathered states hold both ranks, and the resumed run continues exactly
        assert sorted(s["rank"] for s in r["states"]) == [0, 1]
        assert [tuple(k) for k in r["head"] + r["tail"]] == [tuple(k) for k in r["full"]]
        assert len(r["head"]) == RESUME_AFTER * BATCH


if __name__ == "__main__":
    _rank_main(*sys.argv[1:4])
