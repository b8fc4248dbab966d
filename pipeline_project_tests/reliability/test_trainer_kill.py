"""SIGKILL the trainer (`python -m pipeline_project.training.entrypoint`) mid-step, after its first mid-run
checkpoint, then run it again.

The second invocation resumes from the checkpoint `latest.json` names: its step, its Kafka position (checked
against an undisturbed loader's position after that many batches) and its optimizer state (AdamW's step count
goes on from the checkpoint's). It trains exactly the remaining batches and ends where an undisturbed run ends:
no block is trained twice in the checkpoint lineage and none is skipped.
"""

from __future__ import annotations

import pytest

from pipeline_project_harness.reliability.training_trials import trainer_kill

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("delay_s", [0.0], ids=["right-after-checkpoint"])
def test_trainer_sigkill_mid_step_resumes_without_repeating_or_skipping(healthy_stack, tmp_path, delay_s):
    r = trainer_kill(healthy_stack, tmp_path, delay_s=delay_s)
    assert r.detail["alive_at_kill"], "the trainer finished before the kill: the trial missed"
    failed = [name for name, ok in r.detail["checks"].items() if not ok]
    assert not failed, r.detail
    assert (r.lost, r.duplicated) == (0, 0) and r.blocks_found == r.blocks_claimed
