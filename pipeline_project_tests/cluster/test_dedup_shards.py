"""The dedup index split across two PostgreSQL hosts, one cut for 30 s while two writers race on overlapping
documents (`dedup_shards.shard_host_cut`): every document published exactly once across the shards, each shared
one by exactly one writer, no attempt left pending, and both writers done once the host is back."""

from __future__ import annotations

import pytest

from pipeline_project_harness.cluster import dedup_shards

pytestmark = pytest.mark.cluster


def test_a_shard_host_cut_30s_while_two_writers_race_admits_every_document_once(cluster):
    got = dedup_shards.shard_host_cut(cluster, cut_s=30.0, own=300, shared=200)
    print(f"\nshard host cut: {got['writers']}, rows per shard {got['shard_docs']}, states {got['attempt_states']}")
    writers = got["writers"]
    assert all(w["done_s"] is not None for w in writers.values()), writers
    assert any(w["tries"] for w in writers.values()), "the cut failed no attempt: it missed the writers"
    assert got["expected"] == 2 * 300 + 200 and got["missing"] == [] and got["extra"] == []
    assert sum(got["shard_docs"]) == got["expected"] and got["shared_by_a"] in (0, 200)  # all or none, by one writer
    assert all(set(states) == {"published"} for states in got["attempt_states"]), got["attempt_states"]
    assert all(n > 0 for n in got["shard_docs"])  # both hosts hold documents
    # the writer that lost the shared documents dropped each of them late, as a duplicate of the other's
    assert sorted(w["late_drops"] for w in writers.values()) == [0, 200]
