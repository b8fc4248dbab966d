"""`kill -9` one of the 3 brokers while the producer produces, and while the loader consumes; the broker restarts.

Producer: every block the report claims is in the topic exactly once, in order within its partition, intact,
visible to read_committed, and inside the offset ranges the report claims. Loader (bounded mode, same seed): the
(partition, offset, block) sequence and the bytes delivered equal those of an undisturbed run.
"""

from __future__ import annotations

import pytest

from pipeline_project_harness.reliability.trials import (
    SeededTopic,
    broker_kill_while_consuming,
    broker_kill_while_producing,
    seed_loader_topic,
)

pytestmark = pytest.mark.stack


@pytest.mark.parametrize(
    ("delay_s", "victim", "bounded"),
    [(1.0, "leader", True)],  # bench/reliability.py also kills the transaction coordinator, at other timings
    ids=["1s-leader-4tx"],
)
def test_broker_sigkill_while_producing_keeps_every_block_exactly_once(healthy_stack, delay_s, victim, bounded):
    r = broker_kill_while_producing(healthy_stack, delay_s=delay_s, victim=victim, bounded=bounded)
    audit = r.detail["audit"]
    assert r.detail["killed_during_produce"], "the broker died after the producer returned: the trial missed"
    assert audit["ok"], audit
    assert (r.blocks_claimed, r.blocks_found, r.lost, r.duplicated) == (4096, 4096, 0, 0)
    assert r.attempts == 1, f"produce failed under a broker kill: {r.error} at {r.detail.get('raised_at')}"


@pytest.fixture(scope="module")
def seeded(fault_stack) -> SeededTopic:
    return seed_loader_topic(fault_stack, n_blocks=3000)


@pytest.mark.parametrize("delay_s", [1.5], ids=["1.5s"])
def test_broker_sigkill_while_consuming_delivers_the_undisturbed_sequence(healthy_stack, seeded, delay_s):
    r = broker_kill_while_consuming(healthy_stack, seeded, delay_s=delay_s, down_s=2.0)
    assert not r.error, r.error
    assert r.detail["killed_after_batch"], "the loader finished before the kill point: the trial missed"
    assert r.detail["same_trace"] and r.detail["same_digest"], r.detail
    assert (r.lost, r.duplicated) == (0, 0)
