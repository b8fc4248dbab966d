"""The dedup index holds only documents of published batches: `cleaned_shards` is SIGKILLed between its stores,
an overlapping batch is cleaned, the first is abandoned, and no document is lost or kept twice (counted by
content hash against an undisturbed run). Real PostgreSQL and S3 of the shared stack."""

import pytest

from pipeline_project_harness.reliability.dedup_trials import index_commit_kill

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("kill_at", ["before_manifest", "after_manifest"])
def test_a_batch_killed_between_index_and_manifest_loses_no_document_of_a_later_batch(stack, pg_url, kill_at):
    r = index_commit_kill(stack, pg_url, kill_at=kill_at)
    assert r.detail["first_published"] == (kill_at == "after_manifest"), r
    assert r.detail["second_cleaned"] and not r.error, r
    assert (r.lost, r.duplicated) == (0, 0), r
    assert r.ok and r.blocks_claimed > 0, r
