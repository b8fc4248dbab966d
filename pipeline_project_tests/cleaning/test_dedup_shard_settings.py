"""How the dedup index is opened from settings: several URLs in PIPELINE_DEDUP_SHARD_URLS make the sharded index,
one URL or none the single one; and the placement of documents on shards (no services)."""

from __future__ import annotations

import numpy as np

from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex
from pipeline_project.cleaning.dedup.sharded import ShardedDedupIndex, shard_of
from pipeline_project.defs.resources import build_resources
from pipeline_project.settings import Settings


def _dedup(monkeypatch, value: str | None):
    if value is None:
        monkeypatch.delenv("PIPELINE_DEDUP_SHARD_URLS", raising=False)
    else:
        monkeypatch.setenv("PIPELINE_DEDUP_SHARD_URLS", value)
    monkeypatch.setenv("PIPELINE_POSTGRES_URL", "postgresql://pipeline@main:5432/pipeline")
    return build_resources(Settings())["dedup"].open(num_perm=112, num_bands=14)


def test_several_urls_make_one_index_over_shards_in_their_order(monkeypatch):
    index = _dedup(monkeypatch, " postgresql://pipeline@a:5432/dedup, postgresql://pipeline@b:5432/dedup ,")
    assert isinstance(index, ShardedDedupIndex)
    assert [s.url for s in index.shards] == ["postgresql://pipeline@a:5432/dedup", "postgresql://pipeline@b:5432/dedup"]
    assert {(s.num_perm, s.num_bands, s.schema) for s in index.shards} == {(112, 14, "dedup")}


def test_one_url_or_none_is_the_single_index(monkeypatch):
    one = _dedup(monkeypatch, "postgresql://pipeline@a:5432/dedup")
    assert isinstance(one, PostgresDedupIndex) and one.url == "postgresql://pipeline@a:5432/dedup"
    unset = _dedup(monkeypatch, None)
    assert isinstance(unset, PostgresDedupIndex) and unset.url == "postgresql://pipeline@main:5432/pipeline"


def test_documents_spread_evenly_and_stay_where_they_are_placed():
    keys = np.random.default_rng(0).integers(0, 2**63, size=30_000, dtype=np.int64).astype(np.uint64)
    for n in (2, 3, 5):
        counts = np.bincount(shard_of(keys, n), minlength=n)
        assert counts.min() > 0.9 * len(keys) / n
    sequential = np.arange(1, 3001, dtype=np.uint64)  # even keys with structure spread
    assert np.bincount(shard_of(sequential, 2)).min() > 1300
    # pinned: a change of the placement would move every stored document (resharding is not built)
    assert shard_of(np.array([1, 2, 3, 12345, 2**64 - 1], dtype=np.uint64), 2).tolist() == [1, 0, 0, 1, 1]
    assert shard_of(np.array([12345], dtype=np.uint64), 4).tolist() == [1]
