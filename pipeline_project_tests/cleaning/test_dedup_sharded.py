"""The dedup index split across databases (`cleaning/dedup/sharded.py`) on the stack's real PostgreSQL, each shard a
database of its own: the same decisions as one index, racing writers admit each document once, a killed writer
is resolved on every shard, and a shard cut mid-reserve is one clear error that loses nothing."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import psycopg2
import pytest

from pipeline_project.cleaning.dedup import attempts, shard_writes
from pipeline_project.cleaning.dedup.attempts import AttemptLostError
from pipeline_project.cleaning.dedup.postgres import DedupStoreUnavailableError, PostgresDedupIndex
from pipeline_project.cleaning.dedup.sharded import ShardedDedupIndex, shard_of
from pipeline_project.cleaning.errors import CleaningError
from pipeline_project_harness.standins import WholeBatchPipeline
from pipeline_project_tests.cleaning.test_dedup_store import CONFIG, _corpus, _docs, _edit, _kept_ids

pytestmark = pytest.mark.stack


def _databases(stack, n: int):
    names = [f"test_{uuid.uuid4().hex[:8]}" for _ in range(n)]
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        for name in names:
            cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    base = stack.postgres_url.rsplit("/", 1)[0]
    return names, [f"{base}/{name}" for name in names]


def _drop(stack, names) -> None:
    admin = psycopg2.connect(stack.postgres_url)  # a new session: a test may have cut the others
    admin.autocommit = True
    with admin.cursor() as cur:
        for name in names:
            cur.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.close()


@pytest.fixture
def shard_urls(stack):
    """Two fresh databases on the stack's server, the shards of one index, dropped afterwards."""
    names, urls = _databases(stack, 2)
    yield urls
    _drop(stack, names)


@pytest.fixture
def three_shards(stack):
    names, urls = _databases(stack, 3)
    yield urls
    _drop(stack, names)


def _terminate(stack, url: str) -> int:
    """End every session on the database of `url` (as a cut host does to the sessions on it)."""
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()",
            (url.rsplit("/", 1)[1],),
        )
        ended = cur.fetchone()[0]
    admin.close()
    return ended


def _query(url: str, sql: str, args=()) -> list:
    conn = psycopg2.connect(url, options="-c search_path=dedup")
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def _attempts(url: str) -> dict[str, str]:
    return dict(_query(url, "SELECT attempt, state FROM dedup_attempts"))


def _doc_ids(url: str) -> list[str]:
    return [row[0] for row in _query(url, "SELECT doc_id FROM dedup_kept")]


def _keys_on(shard: int, n: int, count: int, start: int = 1) -> list[int]:
    """`count` exact keys (from `start` up) whose documents live on shard `shard` of `n`."""
    keys = np.arange(start, start + 50 * count + 50, dtype=np.uint64)
    return keys[shard_of(keys, n) == shard][:count].tolist()


def _rows(*keys: int, bands=None, sigs=None):
    n = len(keys)
    return (
        [f"doc-{k}" for k in keys],
        np.array(keys, dtype=np.uint64),
        np.zeros((n, 14), np.uint64) if bands is None else bands,
        np.zeros((n, 112), np.uint32) if sigs is None else sigs,
    )


def _reserve(index, batch, attempt, *keys, **kw):
    return index.reserve_batch(batch, attempt, *_rows(*keys, **kw), near_threshold=0.8)


def _found(urls, batch, *keys, is_published=None) -> list[bool]:
    index = ShardedDedupIndex(urls, is_published=is_published)
    try:
        index.begin_batch(batch)
        return (index.lookup_exact(np.array(keys, dtype=np.uint64)) >= 0).tolist()
    finally:
        index.close()


# -- (1) the same decisions as one index --------------------------------------------------------------------------
@pytest.mark.parametrize("shards", [2, 3])
def test_same_decisions_as_one_index_over_a_batch_sequence(pg_url, request, shards):
    urls = request.getfixturevalue("shard_urls" if shards == 2 else "three_shards")
    base, more = _corpus(31, 16), _corpus(32, 8)
    batches = [
        ("s1", base),
        ("s2", [base[0], base[3], _edit(base[1], 30, 8, 90_000), _edit(base[2], 100, 6, 91_000), *more[:4]]),
        ("s3", [more[0], _edit(more[1], 10, 8, 92_000), base[5], *_corpus(33, 6), _edit(base[6], 200, 5, 93_000)]),
        ("s2", [base[0], base[3], _edit(base[1], 30, 8, 90_000), *more[:5]]),  # a re-run replaces its publication
        ("s4", [*base[:4], *more[:6], _edit(base[7], 50, 8, 94_000)]),
    ]
    one, sharded = PostgresDedupIndex(pg_url), ShardedDedupIndex(urls)
    pipeline = WholeBatchPipeline(CONFIG)
    for batch, texts in batches:
        a = pipeline.run(_docs(batch, texts), batch, one)
        b = pipeline.run(_docs(batch, texts), batch, sharded)
        assert _kept_ids(a) == _kept_ids(b), batch
        assert sorted((d.id, d.reason) for d in a.dropped) == sorted((d.id, d.reason) for d in b.dropped), batch
    assert any(d.reason.startswith("near_duplicate_of:") for d in b.dropped)
    assert len(sharded) == len(one)
    per_shard = [_doc_ids(url) for url in urls]
    assert all(per_shard), "every shard holds documents"
    assert sum(len(ids) for ids in per_shard) == len(one)
    assert [_query(url, "SELECT value FROM dedup_meta WHERE name = 'shard'")[0][0] for url in urls] == [
        f"{s}/{shards}" for s in range(shards)
    ]
    one.close()
    sharded.close()


def test_a_near_duplicate_of_a_document_on_another_shard_is_dropped_late(shard_urls):
    a, b = _keys_on(0, 2, 1)[0], _keys_on(1, 2, 1)[0]
    bands = np.arange(1, 15, dtype=np.uint64).reshape(1, 14) * 1000
    sigs = np.arange(112, dtype=np.uint32).reshape(1, 112)
    first, second = ShardedDedupIndex(shard_urls), ShardedDedupIndex(shard_urls)
    first.commit_batch("a", *_rows(a, bands=bands, sigs=sigs), near_threshold=0.8)
    near = sigs.copy()
    near[0, :5] += 7  # 107 of 112 values agree: an estimate of 0.955
    late = _reserve(second, "b", "b-1", b, bands=bands, sigs=near)
    assert late == {0: f"near_duplicate_of:a/doc-{a}"}
    second.publish("b-1")
    assert _doc_ids(shard_urls[0]) == [f"doc-{a}"] and _doc_ids(shard_urls[1]) == []
    first.close()
    second.close()


def test_shards_given_in_another_order_are_refused(shard_urls):
    index = ShardedDedupIndex(shard_urls)
    index.begin_batch("x")
    index.close()
    with pytest.raises(CleaningError, match="shard 1/2 of another layout"):
        ShardedDedupIndex(list(reversed(shard_urls))).begin_batch("x")
    single = PostgresDedupIndex(shard_urls[0])  # one server keeps working on a shard's database
    single.begin_batch("y")
    single.close()


# -- (2) racing writers ----------------------------------------------------------------------------------------------
def test_racing_writers_on_overlapping_documents_admit_each_once(shard_urls):
    shared = _corpus(34, 10)
    batches = {f"r{k}": shared + _corpus(40 + k, 3) for k in range(4)}
    results: dict[str, object] = {}
    barrier = threading.Barrier(len(batches))

    def clean(batch_id: str) -> None:
        index = ShardedDedupIndex(shard_urls)
        pipeline = WholeBatchPipeline(CONFIG)
        result = pipeline.run(_docs(batch_id, batches[batch_id]), batch_id, index, commit=False)
        barrier.wait()  # every batch has looked up an index that holds none of the others
        results[batch_id] = pipeline.commit(result, index)
        index.close()

    threads = [threading.Thread(target=clean, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert len(results) == len(batches)
    kept_texts = [d.text for r in results.values() for d in r.kept]
    for text in shared:
        assert kept_texts.count(text) == 1, "a shared document was lost or admitted twice"
    assert len(kept_texts) == len(set(kept_texts)) == len(shared) + 3 * len(batches)
    stored = [doc for url in shard_urls for doc in _doc_ids(url)]
    assert len(stored) == len(kept_texts) and all(_doc_ids(url) for url in shard_urls)


@pytest.mark.parametrize("first_publishes", [True, False])
def test_a_writer_waits_on_a_pending_key_of_another_shard(shard_urls, first_publishes):
    on_1 = _keys_on(1, 2, 1)[0]  # the shared document lives on shard 1
    on_0 = _keys_on(0, 2, 1)[0]
    first = ShardedDedupIndex(shard_urls)
    second = ShardedDedupIndex(shard_urls, is_published=lambda b, a: False)
    _reserve(first, "a", "a-1", on_1)
    result: dict = {}
    waiter = threading.Thread(target=lambda: result.setdefault("late", _reserve(second, "b", "b-1", on_0, on_1)))
    waiter.start()
    time.sleep(1.5)
    assert waiter.is_alive(), "the second batch waits while the first one's attempt is alive"
    if first_publishes:
        first.publish("a-1")
    else:
        first.close()  # dies before its manifest: its sessions on every shard end
    waiter.join(60)
    second.publish("b-1")
    assert result["late"] == ({1: f"exact_duplicate_of:a/doc-{on_1}"} if first_publishes else {})
    assert _found(shard_urls, "c", on_0, on_1) == [True, True]
    assert sorted(_doc_ids(shard_urls[1])) == [f"doc-{on_1}"]
    first.close()
    second.close()


# -- (3) a writer killed between reserve and publish ---------------------------------------------------------------
@pytest.mark.parametrize("manifest_names_it", [False, True])
def test_a_killed_writer_is_resolved_on_every_shard(shard_urls, manifest_names_it):
    keys = _keys_on(0, 2, 3) + _keys_on(1, 2, 3, start=1000)
    dying = ShardedDedupIndex(shard_urls)
    _reserve(dying, "a", "a-1", *keys)
    dying.close()  # its sessions end, as when the process is killed
    assert [_attempts(url) for url in shard_urls] == [{"a-1": "pending"}] * 2
    asked = []

    def is_published(batch, attempt):
        asked.append((batch, attempt))
        return manifest_names_it

    assert _found(shard_urls, "b", *keys, is_published=is_published) == [manifest_names_it] * len(keys)
    assert asked == [("a", "a-1")] * 2  # each shard asks the manifest, and they agree
    expected = {"a-1": "published"} if manifest_names_it else {}
    assert [_attempts(url) for url in shard_urls] == [expected] * 2


def test_a_writer_killed_midway_through_publishing_is_completed_from_its_manifest(shard_urls):
    keys = _keys_on(0, 2, 2) + _keys_on(1, 2, 2, start=1000)
    dying = ShardedDedupIndex(shard_urls)
    _reserve(dying, "a", "a-1", *keys)
    dying.shards[0].publish("a-1")  # shard 0 published, then the process dies before shard 1
    dying.close()
    assert [_attempts(url) for url in shard_urls] == [{"a-1": "published"}, {"a-1": "pending"}]
    assert _found(shard_urls, "b", *keys, is_published=lambda b, a: a == "a-1") == [True] * 4
    assert [_attempts(url) for url in shard_urls] == [{"a-1": "published"}] * 2


# -- (4) a shard cut mid-reserve -----------------------------------------------------------------------------------
@pytest.mark.parametrize("when", ["before_the_commits", "between_the_commits"])
def test_a_shard_cut_mid_reserve_is_one_clear_error_and_a_retry_admits_everything_once(
    stack, shard_urls, monkeypatch, when
):
    keys = _keys_on(0, 2, 4) + _keys_on(1, 2, 4, start=1000)
    index = ShardedDedupIndex(shard_urls, is_published=lambda b, a: False, connect_timeout_s=2)
    index.begin_batch("a")
    cut, real_url = index.shards[1], shard_urls[1]
    insert_rows = shard_writes.insert_rows

    def cut_host(shard, cur, *args):
        if shard is cut and when == "before_the_commits":
            assert _terminate(stack, real_url) >= 1
            cut.url = "postgresql://pipeline:x@127.0.0.1:1/down"  # and it stays unreachable for now
        insert_rows(shard, cur, *args)
        if shard is cut and when == "between_the_commits":  # its rows are sent; shard 0 commits, then shard 1 fails
            assert _terminate(stack, real_url) >= 1
            cut.url = "postgresql://pipeline:x@127.0.0.1:1/down"

    left: list[dict] = []
    withdraw = ShardedDedupIndex._withdraw

    def seen_then_withdrawn(self, attempt):
        left.append(_attempts(shard_urls[0]))  # what the failed reserve left on the healthy shard
        withdraw(self, attempt)

    monkeypatch.setattr(shard_writes, "insert_rows", cut_host)
    monkeypatch.setattr(ShardedDedupIndex, "_withdraw", seen_then_withdrawn)
    with pytest.raises(DedupStoreUnavailableError, match="dedup index database"):
        _reserve(index, "a", "a-1", *keys)
    monkeypatch.undo()
    assert left == [{"a-1": "pending"} if when == "between_the_commits" else {}]
    assert _attempts(shard_urls[0]) == {} and _doc_ids(shard_urls[0]) == [], "nothing half-admitted on shard 0"
    assert _attempts(real_url) == {}
    with pytest.raises(DedupStoreUnavailableError):
        index.begin_batch("a")  # the host is still down: clear, and nothing else is touched
    cut.url = real_url  # the host is back
    index.begin_batch("a")
    assert _reserve(index, "a", "a-2", *keys) == {}
    index.confirm("a-2")
    index.publish("a-2")
    stored = [doc for url in shard_urls for doc in _doc_ids(url)]
    assert sorted(stored) == sorted(f"doc-{k}" for k in keys)
    assert _found(shard_urls, "b", *keys) == [True] * len(keys)
    assert [_attempts(url) for url in shard_urls] == [{"a-2": "published"}] * 2
    index.close()


def test_a_shard_unreachable_from_the_start_is_one_clear_error(shard_urls):
    index = ShardedDedupIndex([shard_urls[0], "postgresql://pipeline:x@127.0.0.1:1/down"], connect_timeout_s=2)
    with pytest.raises(DedupStoreUnavailableError, match="dedup index database unreachable"):
        index.begin_batch("a")
    index.close()


def test_a_shard_cut_between_the_publishes_is_completed_from_the_manifest(stack, shard_urls, monkeypatch):
    keys = _keys_on(0, 2, 3) + _keys_on(1, 2, 3, start=1000)
    index = ShardedDedupIndex(shard_urls, connect_timeout_s=2)
    _reserve(index, "a", "a-1", *keys)
    index.confirm("a-1")  # then the manifest names a-1
    cut, real_url = index.shards[1], shard_urls[1]
    publish_rows, calls = attempts.publish_rows, []

    def cut_after_the_last(cur, attempt):
        done = publish_rows(cur, attempt)
        calls.append(attempt)
        if len(calls) == 2:  # every statement sent: shard 0 commits, then shard 1 fails
            _terminate(stack, real_url)
            cut.url = "postgresql://pipeline:x@127.0.0.1:1/down"
        return done

    monkeypatch.setattr(attempts, "publish_rows", cut_after_the_last)
    with pytest.raises(DedupStoreUnavailableError):
        index.publish("a-1")
    monkeypatch.undo()
    assert [_attempts(url) for url in shard_urls] == [{"a-1": "published"}, {"a-1": "pending"}]
    cut.url = real_url  # back: the next batch settles shard 1 by the manifest
    assert _found(shard_urls, "b", *keys, is_published=lambda b, a: a == "a-1") == [True] * len(keys)
    assert [_attempts(url) for url in shard_urls] == [{"a-1": "published"}] * 2
    index.close()


def test_a_writer_that_lost_one_shard_session_does_not_confirm_and_abandons_everywhere(stack, shard_urls):
    keys = _keys_on(0, 2, 2) + _keys_on(1, 2, 2, start=1000)
    index = ShardedDedupIndex(shard_urls, is_published=lambda b, a: False)
    _reserve(index, "a", "a-1", *keys)
    _terminate(stack, shard_urls[1])  # the session holding a-1's lock on shard 1 ends
    with pytest.raises((DedupStoreUnavailableError, AttemptLostError)):
        index.confirm("a-1")
    index.abandon("a-1")
    assert [_attempts(url) for url in shard_urls] == [{}, {}]
    assert [_doc_ids(url) for url in shard_urls] == [[], []]
    index.close()


def test_a_handed_over_band_key_taken_on_another_shard_keeps_one_owner(shard_urls):
    on_0, on_1 = _keys_on(0, 2, 2), _keys_on(1, 2, 1, start=1000)
    bands = np.arange(1, 15, dtype=np.uint64).reshape(1, 14) * 1000
    other = np.zeros((1, 112), np.uint32)
    index = ShardedDedupIndex(shard_urls)
    index.commit_batch("a", *_rows(on_0[0], bands=bands, sigs=other), near_threshold=0.8)
    rerun = ShardedDedupIndex(shard_urls)
    rerun.begin_batch("a")
    assert _reserve(rerun, "a", "a-2", on_1[0], bands=bands, sigs=other + 1) == {}  # keys handed over at publish
    with psycopg2.connect(shard_urls[0], options="-c search_path=dedup") as conn, conn.cursor() as cur:
        cur.execute("SELECT attempt FROM dedup_attempts WHERE state = 'published'")
        assert attempts.forget_rows(cur, cur.fetchone()[0], [f"doc-{on_0[0]}"]) == 1  # retune drops the owner
    conn.close()
    index.commit_batch("c", *_rows(on_0[1], bands=bands, sigs=other + 2), near_threshold=0.8)  # takes the keys
    rerun.publish("a-2")
    owners = [_query(url, "SELECT doc_id FROM dedup_kept WHERE band0 = %s", (1000,)) for url in shard_urls]
    assert owners == [[(f"doc-{on_0[1]}",)], []], "the band key has one owner across the shards"
    index.close()
    rerun.close()


# -- (5) the commands that write the index reach every shard ------------------------------------------------------
def test_an_import_and_a_retunes_forgetting_reach_every_shard(pg_url, shard_urls):
    """`dedup-import` and `retune --write` open the index through `cleaning.dedup.opening`: an imported index is
    split over the shards with the decisions of one index, and forgetting a batch's documents removes them from
    whichever shard holds them, so they are kept again when they come back."""
    from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
    from pipeline_project.cleaning.dedup.migrate import import_local_index
    from pipeline_project.cleaning.dedup.opening import open_index
    from pipeline_project.cleaning.retune.write import forget_documents

    texts = _corpus(41, 12)
    memory = MemoryDedupIndex()
    WholeBatchPipeline(CONFIG).run(_docs("i1", texts), "i1", memory)
    sharded = open_index(pg_url, shard_urls)
    assert isinstance(sharded, ShardedDedupIndex)
    try:
        assert import_local_index(sharded, MemoryDedupIndex.from_bytes(memory.to_bytes())) == len(texts)
    finally:
        sharded.close()
    on_shards = [_doc_ids(url) for url in shard_urls]
    assert all(on_shards) and sorted(d for ids in on_shards for d in ids) == sorted(
        f"i1-{i}" for i in range(len(texts))
    )

    probe = [texts[0], _edit(texts[1], start=50, count=6, fresh=70_000), *_corpus(42, 1)]
    one = PostgresDedupIndex(pg_url)
    try:
        assert import_local_index(one, MemoryDedupIndex.from_bytes(memory.to_bytes())) == len(texts)
        want = WholeBatchPipeline(CONFIG).run(_docs("i2", probe), "i2", one)
    finally:
        one.close()
    got = WholeBatchPipeline(CONFIG).run(_docs("i2", probe), "i2", ShardedDedupIndex(shard_urls))
    assert [(d.id, d.reason) for d in got.dropped] == [(d.id, d.reason) for d in want.dropped]
    assert len(got.dropped) == 2

    (attempt,) = [a for a in _attempts(shard_urls[0]) if a.startswith("i1:")]
    assert forget_documents(shard_urls)(attempt, [f"i1-{i}" for i in range(len(texts))]) == len(texts)
    assert not any(d.startswith("i1-") for url in shard_urls for d in _doc_ids(url))
    again = WholeBatchPipeline(CONFIG).run(_docs("i3", texts[:3]), "i3", ShardedDedupIndex(shard_urls))
    assert again.counts["kept"] == 3
