"""The dedup index's tables (version 3) on the stack's real PostgreSQL: what a kept document costs on disk, and the
upgrade of a version 2 index in place with every decision, handover and copy count kept."""

from __future__ import annotations

from collections import Counter

import numpy as np
import psycopg2
import pytest
import xxhash

from pipeline_project.cleaning.dedup import copies as copy_counts
from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex
from pipeline_project.cleaning.dedup.sizes import relation_sizes, total_bytes

pytestmark = pytest.mark.stack

# measured 2026-12-07 (docs/benchmarks/2026-12-07-dedup-scale.md): version 2 took ~2,490 bytes per kept document
# over 20 such batches, version 3 ~1,260; one batch of 2,000 alone reads ~1,520 (the first pages of 16 indexes)
MAX_BYTES_PER_KEPT_DOC = 1_700


def _batch(rng, n: int):
    sigs = rng.integers(0, 2**32, size=(n, 112), dtype=np.uint32)
    bands = np.array(
        [[xxhash.xxh3_64_intdigest(r.tobytes(), seed=b) or 1 for b, r in enumerate(s.reshape(14, 8))] for s in sigs],
        dtype=np.uint64,
    )
    exact = rng.integers(1, 2**63, size=n, dtype=np.int64).astype(np.uint64)
    return [f"raw/cc/2024-10/part-00001.jsonl.zst#{i}" for i in range(n)], exact, bands, sigs


def test_a_published_batch_of_2000_documents_costs_under_the_bound_per_document(pg_url):
    index = PostgresDedupIndex(pg_url)
    doc_ids, exact, bands, sigs = _batch(np.random.default_rng(1), 2000)
    batch = "2026-12-07T11-000001-a1b2c3d4"
    attempt = f"{batch}:0123456789ab"
    index.begin_batch(batch)
    assert index.reserve_batch(batch, attempt, doc_ids, exact, bands, sigs, near_threshold=0.7) == {}
    copies = Counter({(f"{batch}/{d}", "exact"): 2 for d in doc_ids[::10]})
    copy_counts.batch_copies(batch, copies, doc_ids, {}, index, attempt)
    index.publish(attempt)
    with index.cursor() as cur:
        per_doc = total_bytes(cur, "dedup") / len(doc_ids)
        by_relation = {r.relation: r.bytes for r in relation_sizes(cur, "dedup")}
    index.close()
    assert per_doc <= MAX_BYTES_PER_KEPT_DOC, by_relation
    assert "dedup_bands" not in by_relation and "dedup_docs" not in by_relation


V2_SCHEMA = """
CREATE SCHEMA dedup;
CREATE TABLE dedup.dedup_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO dedup.dedup_meta VALUES ('schema_version', '2'), ('num_perm', '112'), ('num_bands', '14');
SET search_path = dedup;
CREATE TABLE dedup_attempts (attempt TEXT PRIMARY KEY, batch_id TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'published')), by_manifest BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE dedup_docs (id BIGSERIAL PRIMARY KEY,
    attempt TEXT NOT NULL REFERENCES dedup_attempts (attempt) ON DELETE CASCADE, batch_id TEXT NOT NULL,
    doc_id TEXT NOT NULL, exact_key BIGINT, signature BYTEA, UNIQUE (attempt, doc_id));
CREATE TABLE dedup_exact (key BIGINT PRIMARY KEY, doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE);
CREATE TABLE dedup_bands (key BIGINT PRIMARY KEY, doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE);
CREATE TABLE dedup_handover (attempt TEXT NOT NULL REFERENCES dedup_attempts (attempt) ON DELETE CASCADE,
    kind TEXT NOT NULL, key BIGINT NOT NULL, doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE);
CREATE TABLE dedup_copies (attempt TEXT NOT NULL REFERENCES dedup_attempts (attempt) ON DELETE CASCADE,
    target TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('exact', 'near')), n INTEGER NOT NULL,
    PRIMARY KEY (attempt, target, kind));
"""


def _signed(keys) -> list[int]:
    return np.asarray(keys, dtype=np.uint64).view(np.int64).tolist()


def test_a_version_2_index_is_upgraded_in_place_with_every_decision_handover_and_count(pg_url):
    doc_ids, exact, bands, sigs = _batch(np.random.default_rng(2), 3)
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute(V2_SCHEMA)
        cur.execute(
            "INSERT INTO dedup_attempts VALUES ('old:1', 'old', 'published', true), ('old:2', 'old', 'pending', true)"
        )
        for i in range(2):  # two documents of the published attempt, all their keys theirs
            cur.execute(
                "INSERT INTO dedup_docs (attempt, batch_id, doc_id, exact_key, signature) VALUES ('old:1', 'old', %s, %s, %s) "
                "RETURNING id",
                (doc_ids[i], _signed(exact)[i], sigs[i].tobytes()),
            )
            doc = cur.fetchone()[0]
            cur.execute("INSERT INTO dedup_exact VALUES (%s, %s)", (_signed(exact)[i], doc))
            cur.execute("INSERT INTO dedup_bands SELECT unnest(%s::bigint[]), %s", (_signed(bands[i]), doc))
        # a pending re-run of the batch that takes over document 0's band 5 when it is published
        cur.execute(
            "INSERT INTO dedup_docs (attempt, batch_id, doc_id, exact_key, signature) VALUES ('old:2', 'old', %s, %s, %s) "
            "RETURNING id",
            (doc_ids[2], _signed(exact)[2], sigs[0].tobytes()),
        )
        rerun = cur.fetchone()[0]
        cur.execute("INSERT INTO dedup_exact VALUES (%s, %s)", (_signed(exact)[2], rerun))
        cur.execute("INSERT INTO dedup_handover VALUES ('old:2', 'bands', %s, %s)", (_signed(bands[0])[5], rerun))
        cur.execute(
            "INSERT INTO dedup_copies VALUES ('old:1', %s, 'exact', 3), ('old:1', %s, 'near', 1)",
            (f"old/{doc_ids[1]}",) * 2,
        )
    conn.close()

    index = PostgresDedupIndex(pg_url, is_published=lambda batch, attempt: False)
    index.begin_batch("new")  # the pending re-run is dead (no session holds it) and no manifest names it: removed
    assert (index.lookup_exact(exact) >= 0).tolist() == [True, True, False]
    hits = index.lookup_bands(bands[:2])
    assert (hits >= 0).all() and str(index.entry(int(hits[1, 3]))) == f"old/{doc_ids[1]}"
    assert copy_counts.counts(index, [f"old/{doc_ids[1]}", f"old/{doc_ids[0]}"]) == {
        f"old/{doc_ids[1]}": (3, 1),
        f"old/{doc_ids[0]}": (0, 0),
    }
    late = index.commit_batch("new", [doc_ids[0]], exact[:1], bands[:1], sigs[:1], near_threshold=0.7)
    assert late == {0: f"exact_duplicate_of:old/{doc_ids[0]}"}
    with index.cursor() as cur:
        cur.execute("SELECT value FROM dedup_meta WHERE name = 'schema_version'")
        assert cur.fetchone()[0] == "3"
        cur.execute("SELECT to_regclass('dedup_docs'), to_regclass('dedup_bands'), to_regclass('dedup_copies_v2')")
        assert cur.fetchone() == (None, None, None)
    index.close()


def test_the_upgrade_keeps_a_pending_attempts_handover(pg_url):
    doc_ids, exact, bands, sigs = _batch(np.random.default_rng(3), 1)
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute(V2_SCHEMA)
        cur.execute("INSERT INTO dedup_attempts VALUES ('a:1', 'a', 'published', true), ('a:2', 'a', 'pending', true)")
        for attempt in ("a:1", "a:2"):
            cur.execute(
                "INSERT INTO dedup_docs (attempt, batch_id, doc_id, exact_key, signature) VALUES (%s, 'a', %s, %s, %s) "
                "RETURNING id",
                (attempt, doc_ids[0], _signed(exact)[0], sigs[0].tobytes()),
            )
            doc = cur.fetchone()[0]
        cur.execute("INSERT INTO dedup_exact SELECT %s, min(id) FROM dedup_docs", (_signed(exact)[0],))
        cur.execute(
            "INSERT INTO dedup_bands SELECT unnest(%s::bigint[]), min(id) FROM dedup_docs", (_signed(bands[0]),)
        )
        cur.execute("INSERT INTO dedup_handover VALUES ('a:2', 'exact', %s, %s)", (_signed(exact)[0], doc))
        cur.execute(
            "INSERT INTO dedup_handover SELECT 'a:2', 'bands', unnest(%s::bigint[]), %s", (_signed(bands[0]), doc)
        )
    conn.close()
    index = PostgresDedupIndex(pg_url)
    index.publish("a:2")  # the re-run's manifest was written before the upgrade
    index.begin_batch("b")
    assert (index.lookup_exact(exact) >= 0).all() and (index.lookup_bands(bands) >= 0).all()
    assert str(index.entry(int(index.lookup_exact(exact)[0]))) == f"a/{doc_ids[0]}"
    with index.cursor() as cur:
        cur.execute("SELECT attempt, state FROM dedup_attempts")
        assert cur.fetchall() == [("a:2", "published")]
    index.close()
