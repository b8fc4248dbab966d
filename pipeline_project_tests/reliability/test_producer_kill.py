"""SIGKILL the producing process inside a transaction, then retry the same ledger key in a new process.

After the kill read_committed shows no block of the open transaction: nothing (one transaction) or exactly the
blocks of the transactions committed before it (a prefix, bounded transactions). The retry completes, and then
every block is visible exactly once, in order, inside the claimed ranges; a third run produces nothing.
"""

from __future__ import annotations

import pytest

from pipeline_project_harness.reliability.trials import producer_process_kill

pytestmark = pytest.mark.stack


@pytest.mark.parametrize(("delay_s", "bounded"), [(2.0, True)], ids=["2s-4tx"])
def test_producer_sigkill_mid_transaction_then_retry_is_exactly_once(healthy_stack, delay_s, bounded):
    r = producer_process_kill(healthy_stack, delay_s=delay_s, bounded=bounded)
    d = r.detail
    assert d["alive_at_kill"] and d["uncommitted_after_kill"] > 0, f"the kill did not land in a transaction: {d}"
    assert d["visible_is_prefix"], d
    if not bounded:
        assert d["visible_after_kill"] == 0, d
    assert not d["retry_reused"], "the killed attempt must not have completed the batch"
    assert d["audit"]["ok"], d["audit"]
    assert (r.blocks_claimed, r.blocks_found, r.lost, r.duplicated) == (4096, 4096, 0, 0)
    assert d["rerun_reused"] and d["rerun_same_offsets"], d
