"""A broker host cut off for 30 s while a batch is produced and while the loader feeds training, both at once.

The cut broker is the one the producer's admin client takes for the controller, so `ensure_topic` on the existing
topic during the cut must not need it. Counted by sequence number and content hash (`broker_faults`).
"""

from __future__ import annotations

import pytest

from pipeline_project_harness.cluster import broker_faults

pytestmark = pytest.mark.cluster


def test_broker_host_cut_30s_while_producing_and_loading(cluster):
    produced, loaded = broker_faults.broker_cut(cluster, produce=True, load=True, victim="controller")
    print(f"\n{produced.victim} cut {produced.timing_s:.0f} s: produce {produced.detail['returned_s_after_cut']} s "
          f"after the cut, ensure_topic {produced.detail.get('ensure_topic_s')} s; loader first batch after heal "
          f"{loaded.detail['first_batch_after_heal_s']} s after the cut, done {loaded.recovery_s} s "
          f"(longest stall {loaded.detail['longest_stall_s']} s)")  # fmt: skip
    # during the cut: ensure_topic answers from metadata, both batches commit without a retry
    assert "ensure_topic_error" not in produced.detail, produced.detail
    assert not produced.error, produced.error
    assert produced.ok and produced.attempts == 1, produced
    assert produced.lost == produced.duplicated == 0 and produced.blocks_found == 2 * broker_faults.PRODUCE_BLOCKS
    # the loader waited the stall out and delivered exactly the undisturbed run's blocks, in its order
    assert not loaded.error, loaded.error
    assert loaded.lost == loaded.duplicated == 0 and loaded.blocks_found == loaded.blocks_claimed
    assert loaded.detail["same_trace"] and loaded.detail["same_digest"], loaded.detail
    assert loaded.detail["done_s"] > 0, loaded.detail  # it was still reading when the cut came
