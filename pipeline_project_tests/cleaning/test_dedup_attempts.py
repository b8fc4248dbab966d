"""The dedup index's attempts on the stack's real PostgreSQL: pending rows are invisible until published, a dead
attempt is published or removed as its manifest says, and a batch that meets another's pending keys waits."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline_project.cleaning.dedup.postgres import AttemptLostError, DedupStoreUnavailableError, PostgresDedupIndex

pytestmark = pytest.mark.stack


def _rows(*keys: int):
    n = len(keys)
    return (
        [f"doc-{k}" for k in keys],
        np.array(keys, dtype=np.uint64),
        np.zeros((n, 14), np.uint64),
        np.zeros((n, 112), np.uint32),
    )


def _reserve(index, batch, attempt, *keys):
    return index.reserve_batch(batch, attempt, *_rows(*keys), near_threshold=0.8)


def _found(url, batch, *keys, is_published=None) -> list[bool]:
    index = PostgresDedupIndex(url, is_published=is_published)
    try:
        index.begin_batch(batch)
        return (index.lookup_exact(np.array(keys, dtype=np.uint64)) >= 0).tolist()
    finally:
        index.close()


def _attempts(url) -> dict[str, str]:
    index = PostgresDedupIndex(url)
    with index.cursor() as cur:
        cur.execute("SELECT attempt, state FROM dedup_attempts")
        rows = dict(cur.fetchall())
    index.close()
    return rows


def test_pending_rows_are_invisible_until_the_attempt_is_published(pg_url):
    first = PostgresDedupIndex(pg_url)
    assert _reserve(first, "a", "a-1", 1, 2) == {}
    assert _found(pg_url, "b", 1, 2) == [False, False]  # alive and pending: another batch does not see it
    first.publish("a-1")
    assert _found(pg_url, "b", 1, 2) == [True, True]
    first.close()


@pytest.mark.parametrize("manifest_names_it", [False, True])
def test_a_dead_attempt_is_published_only_if_its_manifest_names_it(pg_url, manifest_names_it):
    dying = PostgresDedupIndex(pg_url)
    _reserve(dying, "a", "a-1", 1, 2)
    dying.close()  # its session ends, as when the process is killed
    asked = []

    def is_published(batch, attempt):
        asked.append((batch, attempt))
        return manifest_names_it

    assert _found(pg_url, "b", 1, 2, is_published=is_published) == [manifest_names_it] * 2
    assert asked == [("a", "a-1")]
    assert _attempts(pg_url) == ({"a-1": "published"} if manifest_names_it else {})


@pytest.mark.parametrize("first_publishes", [True, False])
def test_two_batches_with_the_same_new_document_neither_both_keep_nor_both_drop_it(pg_url, first_publishes):
    first, second = PostgresDedupIndex(pg_url), PostgresDedupIndex(pg_url, is_published=lambda b, a: False)
    _reserve(first, "a", "a-1", 7)
    result: dict = {}
    waiter = threading.Thread(target=lambda: result.setdefault("late", _reserve(second, "b", "b-1", 7, 8)))
    waiter.start()
    time.sleep(1.5)
    assert waiter.is_alive(), "the second batch waits while the first one's attempt is alive"
    if first_publishes:
        first.publish("a-1")
    else:
        first.close()  # dies before its manifest
    waiter.join(30)
    second.publish("b-1")
    assert result["late"] == ({0: "exact_duplicate_of:a/doc-7"} if first_publishes else {})
    assert _found(pg_url, "c", 7, 8) == [True, True]
    owner = PostgresDedupIndex(pg_url)
    owner.begin_batch("c")
    assert owner.entry(int(owner.lookup_exact(np.array([7], np.uint64))[0])).batch_id == (
        "a" if first_publishes else "b"
    )
    owner.close()
    first.close()
    second.close()


def test_a_rerun_replaces_its_batch_only_when_published(pg_url):
    index = PostgresDedupIndex(pg_url)
    index.commit_batch("a", *_rows(1, 2), near_threshold=0.8)
    rerun = PostgresDedupIndex(pg_url)
    assert _reserve(rerun, "a", "a-2", 2, 3) == {}  # key 2 is its own batch's: taken over at publish, not dropped
    assert _found(pg_url, "b", 1, 2, 3) == [True, True, False]  # the earlier publication stays until then
    rerun.publish("a-2")
    assert _found(pg_url, "b", 1, 2, 3) == [False, True, True]
    assert len(index) == 2 and list(_attempts(pg_url).values()) == ["published"]
    dying = PostgresDedupIndex(pg_url)
    _reserve(dying, "a", "a-3", 9)
    dying.close()
    assert _found(pg_url, "b", 1, 2, 3, 9, is_published=lambda b, a: False) == [False, True, True, False]
    index.close()
    rerun.close()


def test_publishing_an_attempt_judged_dead_is_one_clear_error(pg_url):
    slow = PostgresDedupIndex(pg_url)
    _reserve(slow, "a", "a-1", 5)
    slow._conn.close()  # the session ends while the process goes on
    assert _found(pg_url, "b", 5, is_published=lambda b, a: False) == [False]
    with pytest.raises(AttemptLostError, match="re-run the batch"):
        slow.publish("a-1")
    with pytest.raises(AttemptLostError, match="session of attempt a-1 ended"):
        slow.confirm("a-1")


def test_abandoning_after_a_manifest_write_whose_answer_was_lost_publishes_the_attempt(pg_url):
    index = PostgresDedupIndex(pg_url, is_published=lambda b, a: True)  # the PUT landed, its answer did not
    _reserve(index, "a", "a-1", 4)
    index.abandon("a-1")
    assert _found(pg_url, "b", 4) == [True]
    index.close()


V1_SCHEMA = """
CREATE SCHEMA dedup;
CREATE TABLE dedup.dedup_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO dedup.dedup_meta VALUES ('schema_version', '1'), ('num_perm', '112'), ('num_bands', '14');
CREATE TABLE dedup.dedup_docs (id BIGSERIAL PRIMARY KEY, batch_id TEXT NOT NULL, doc_id TEXT NOT NULL,
    exact_key BIGINT, signature BYTEA, UNIQUE (batch_id, doc_id));
CREATE TABLE dedup.dedup_exact (key BIGINT PRIMARY KEY, doc BIGINT NOT NULL REFERENCES dedup.dedup_docs (id) ON DELETE CASCADE);
CREATE TABLE dedup.dedup_bands (key BIGINT PRIMARY KEY, doc BIGINT NOT NULL REFERENCES dedup.dedup_docs (id) ON DELETE CASCADE);
INSERT INTO dedup.dedup_docs (batch_id, doc_id, exact_key) VALUES ('old', 'doc-6', 6);
INSERT INTO dedup.dedup_exact SELECT 6, id FROM dedup.dedup_docs;
"""


def test_a_version_1_index_is_migrated_in_place_with_every_row_published(pg_url):
    import psycopg2

    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute(V1_SCHEMA)
    conn.close()
    assert _found(pg_url, "b", 6) == [True]
    assert _attempts(pg_url) == {"v1:old": "published"}
    index = PostgresDedupIndex(pg_url)
    assert index.commit_batch("b", *_rows(6, 7), near_threshold=0.8) == {0: "exact_duplicate_of:old/doc-6"}
    index.close()


def test_a_pending_attempt_outlives_a_stopped_writer_by_its_staleness_bound_at_most(pg_url):
    """Issue 37 finding 3: an attempt's liveness is its session's lock; a writer that stops talking (a hung process,
    a host whose death the network hides) must lose it after a bound the project sets, not the kernel's 2 h."""
    stopped = PostgresDedupIndex(pg_url, stale_s=1.0)
    assert _reserve(stopped, "a", "a-1", 1, 2) == {}
    started = time.monotonic()
    while _attempts(pg_url).get("a-1") == "pending" and time.monotonic() - started < 30:
        # every batch's begin_batch resolves the attempts whose lock is free; no manifest names this one
        _found(pg_url, "b", 1, is_published=lambda b, a: False)
        time.sleep(0.5)
    assert "a-1" not in _attempts(pg_url) and time.monotonic() - started < 10  # removed: no manifest names it
    assert _found(pg_url, "b", 1, 2) == [False, False]
    with pytest.raises((AttemptLostError, DedupStoreUnavailableError)):
        stopped.publish("a-1")  # the writer that comes back fails its step: the retry reserves again
    stopped.close()
