"""Multi-node training across the cluster's two trainer hosts: torchrun's c10d rendezvous, gloo on CPU, the `tiny`
preset, launched with the command the Kubernetes JobSet runs (`multinode.py`), one lineage continued by
1 node x 2 ranks -> 2 nodes x 2 ranks -> 1 node x 2 ranks."""

from __future__ import annotations

import time
import uuid

import pytest

from pipeline_project_harness.cluster import multinode as mn

pytestmark = pytest.mark.cluster
STEPS = 3


@pytest.fixture(scope="session")
def deepseek_tokenizer():
    from pipeline_project.streaming.tokenizer import load_tokenizer

    return load_tokenizer()


def test_lineage_continues_across_one_and_two_nodes_every_block_once(cluster, deepseek_tokenizer, tmp_path):
    topic, prefix = f"multinode-{uuid.uuid4().hex[:6]}", f"checkpoints/multinode-{uuid.uuid4().hex[:6]}"
    produced = mn.produce(cluster, topic, 80, deepseek_tokenizer)
    blocks = mn.topic_blocks(cluster, topic)
    assert sum(map(len, blocks.values())) == produced and all(len(b) >= 3 * STEPS * mn.BATCH for b in blocks.values())
    hashes = [h for part in blocks.values() for _, _, h in part]
    assert len(set(hashes)) == len(hashes)  # distinct blocks: a block trained twice would show

    mn.clear_downloads("trainer-1", "trainer-2")  # another test's resume dirs are named the same way
    results, timings = [], []
    for hosts in (["trainer-1"], ["trainer-1", "trainer-2"], ["trainer-2"]):
        started = time.monotonic()
        run_id = f"mn-{len(results)}-{uuid.uuid4().hex[:6]}"
        results.append(mn.wait(mn.launch(mn.job(cluster, topic, prefix, max_steps=STEPS), hosts, run_id, tmp_path)))
        timings.append(round(time.monotonic() - started))
    print(f"\ninvocations (1, 2, 1 nodes): {timings} s")

    one, two, back = results
    assert [r["world_size"] for r in results] == [2, 4, 2]
    assert [r["steps"] for r in results] == [STEPS] * 3
    assert [(r["start_step"], r["end_step"]) for r in results] == [(0, 3), (3, 6), (6, 9)]
    assert one["resumed_from"] is None
    assert two["resumed_from"] == one["checkpoint_uri"] and back["resumed_from"] == two["checkpoint_uri"]

    # each node downloaded the checkpoint it resumed from into its own host's directory
    t1, t2 = mn.downloads("trainer-1"), mn.downloads("trainer-2")
    assert [n for n in t1 if n.startswith("resume-step-3-")] and [n for n in t2 if n.startswith("resume-step-3-")]
    assert {n.rsplit("-", 1)[1] for n in [*t1, *t2] if n.startswith("resume-step-3-")} == {"rank0", "rank2"}
    assert [n for n in t2 if n.startswith("resume-step-6-")] and not [n for n in t1 if "step-6" in n]
    step3 = [files for name, files in [*t1.items(), *t2.items()] if name.startswith("resume-step-3-")]
    assert step3[0] == step3[1] and any(f.startswith("hf/") for f in step3[0])

    # positions chain: each invocation starts where the one before it ended, partition by partition
    assert one["start_position"] in ({}, {p: {"offset": 0, "block": 0} for p in blocks})
    assert two["start_position"] == one["end_position"] and back["start_position"] == two["end_position"]
    # the trained blocks, by content hash: none twice, none missing up to the final positions
    trained = [
        h
        for r in results
        for p, part in blocks.items()
        for h in mn.trained_slice(part, r["start_position"].get(p), r["end_position"].get(p, {"offset": 0}))
    ]
    assert len(trained) == sum(r["steps"] * mn.BATCH * r["world_size"] for r in results) == 48
    assert len(set(trained)) == len(trained)
    final = back["end_position"]
    upto = [h for p, part in blocks.items() for h in mn.trained_slice(part, None, final.get(p, {"offset": 0}))]
    assert sorted(trained) == sorted(upto)
