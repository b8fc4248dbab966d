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


@pytest.mark.parametrize("lost", [1, 5], ids=["one-answer-lost", "every-answer-lost"])
def test_lost_answers_to_the_manifest_write_keep_every_document_once(stack, pg_url, lost):
    """Finding 4 on the real S3 server: the manifest PUT is applied and its answer dropped, once (botocore's retry
    is answered) or on all five attempts (botocore raises after the write was applied)."""
    from pipeline_project_harness.reliability.publish_trials import lost_manifest_answers

    r = lost_manifest_answers(stack, pg_url, lost=lost)
    assert r.detail["statuses_of_lost_answers"] == [200] * lost, r
    assert r.detail["batch_1_cleaned"] and r.detail["batch_2_cleaned"] and r.detail["published"] == 2, r
    assert r.detail["objects_missing"] == [] and r.detail["attempt_states"] == {"published": 2}, r
    assert (r.lost, r.duplicated) == (0, 0) and r.blocks_claimed > 0 and r.ok, r


@pytest.mark.parametrize("write", ["shard", "attributes", "sink"])
def test_every_answer_to_a_write_under_the_attempts_keys_lost_publishes_the_batch_once(stack, pg_url, write):
    """The class of finding 4 for the writes made before the manifest names them: all five answers lost, botocore
    raises; the attempt is abandoned and its objects removed, the step's retry publishes the batch, and nothing
    is left that the manifest does not name."""
    from pipeline_project_harness.reliability.publish_trials import lost_answers

    r = lost_answers(stack, pg_url, write=write, lost=5)
    assert r.detail["statuses_of_lost_answers"] == [200] * 5, r
    assert r.detail["batch_1_cleaned"] and r.detail["published"] == 2, r
    assert r.detail["objects_missing"] == [] and r.detail["objects_unreferenced"] == [], r
    assert r.detail["attempt_states"] == {"published": 2}, r
    assert (r.lost, r.duplicated) == (0, 0) and r.ok, r
