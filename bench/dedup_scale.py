"""The cross-batch dedup index at scale: bytes per kept document, and one batch's reserve -> publish as it grows.

Two parts, each in a PostgreSQL schema of its own on the stack's server (dropped at the end unless --keep):

* sizes: `--batches` synthetic batches of `--batch-docs` documents go through the real `PostgresDedupIndex` API
  (begin_batch -> reserve_batch -> batch_copies -> confirm -> publish), with a realistic mix: 15 % exact and
  5 % near duplicates of earlier batches' documents, 10 % of the kept documents with in-batch copies. Then
  `pg_total_relation_size` of every table (and `pg_relation_size` of every index) per kept document.
* scale: the keys of N synthetic kept documents are bulk-loaded with COPY (the index's own layout, indexes
  built after the load), then a real batch is timed through the same API at each size, `--repeats` times
  (median; each repetition a new batch). Goal: the per-batch cost within 1.5x from the smallest to the largest.

Usage:  .venv/bin/python bench/dedup_scale.py [--sizes 1000000 10000000] [--repeats 5] [--scale-batch-docs 3000]
Needs the stack's PostgreSQL (`pipeline-project stack up`). Prints markdown tables, writes
bench/results/dedup_scale.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import psycopg2
import xxhash
from bench_results import host, load_line, print_table, write

from pipeline_project.cleaning.dedup import copies as copy_counts
from pipeline_project.cleaning.dedup import schema
from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex
from pipeline_project.cleaning.dedup.sizes import relation_sizes, total_bytes
from pipeline_project.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "dedup_scale.json"
NUM_PERM, NUM_BANDS = 112, 14
NEAR_THRESHOLD = 0.7
EXACT_DUP, NEAR_DUP, IN_BATCH_COPIES = 0.15, 0.05, 0.10


def doc_name(batch: int, i: int) -> str:
    """A document id as the readers make them: `<object key>#<line>`."""
    return f"raw/cc/2024-10/part-{batch:05d}.jsonl.zst#{i}"


def batch_name(batch: int) -> str:
    return f"2026-12-07T11-{batch:06d}-{batch * 2654435761 % 2**32:08x}"


def bands_of(sigs: np.ndarray) -> np.ndarray:
    """The step's band keys: xxh3 of each band's rows, seeded with the band number (0 means none)."""
    rows = sigs.reshape(len(sigs), NUM_BANDS, NUM_PERM // NUM_BANDS)
    out = np.empty((len(sigs), NUM_BANDS), dtype=np.uint64)
    for i in range(len(sigs)):
        for b in range(NUM_BANDS):
            out[i, b] = xxhash.xxh3_64_intdigest(rows[i, b].tobytes(), seed=b) or 1
    return out


class Pool:
    """Published documents a later batch may duplicate: (exact key, bands, signature, name)."""

    def __init__(self):
        self.exact: list[int] = []
        self.bands: list[np.ndarray] = []
        self.sigs: list[np.ndarray] = []

    def add(self, exact, bands, sigs) -> None:
        self.exact += list(exact)
        self.bands += list(bands)
        self.sigs += list(sigs)


def synthetic_batch(rng: np.random.Generator, n: int, pool: Pool):
    """n documents: fresh ones, exact copies and near copies (4 of 112 values, 4 of 14 bands changed) of pool
    documents."""
    sigs = rng.integers(0, 2**32, size=(n, NUM_PERM), dtype=np.uint32)
    exact = rng.integers(1, 2**63, size=n, dtype=np.int64).astype(np.uint64)
    kind = rng.random(n) if pool.exact else np.ones(n)
    near_rows = []
    for i in range(n):
        if kind[i] < EXACT_DUP + NEAR_DUP:
            j = int(rng.integers(len(pool.exact)))
            sigs[i] = pool.sigs[j]
            if kind[i] < EXACT_DUP:
                exact[i] = pool.exact[j]
            else:
                sigs[i, rng.choice(NUM_PERM, 4, replace=False)] ^= 1
                near_rows.append((i, j))
    bands = bands_of(sigs)
    for i, j in near_rows:  # the pool document's bands, 4 of them changed
        bands[i] = pool.bands[j]
        bands[i, rng.choice(NUM_BANDS, 4, replace=False)] = rng.integers(1, 2**63, size=4, dtype=np.int64)
    return exact, bands, sigs


def publish_batch(index: PostgresDedupIndex, batch: int, exact, bands, sigs, rng) -> tuple[int, float]:
    """One batch through the API as `cleaned_shards` drives it; (kept documents, seconds)."""
    batch_id = batch_name(batch)
    doc_ids = [doc_name(batch, i) for i in range(len(exact))]
    attempt = f"{batch_id}:{uuid.uuid4().hex[:12]}"
    copies: Counter = Counter()
    for i in np.flatnonzero(rng.random(len(doc_ids)) < IN_BATCH_COPIES).tolist():
        copies[(f"{batch_id}/{doc_ids[i]}", "exact" if i % 3 else "near")] += 1 + i % 4
    started = time.perf_counter()
    index.begin_batch(batch_id)
    late_rows = index.reserve_batch(batch_id, attempt, doc_ids, exact, bands, sigs, NEAR_THRESHOLD)
    late = {doc_ids[i]: reason for i, reason in late_rows.items()}
    copy_counts.batch_copies(batch_id, copies, doc_ids, late, index, attempt)
    index.confirm(attempt)
    index.publish(attempt)
    return len(doc_ids) - len(late), time.perf_counter() - started


def fresh_schema(url: str, name: str) -> None:
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    conn.close()


def sizes_part(url: str, batches: int, batch_docs: int, keep: bool) -> dict:
    schema = f"bench_dedup_sizes_{uuid.uuid4().hex[:6]}"
    rng = np.random.default_rng(7)
    index = PostgresDedupIndex(url, schema=schema)
    pool, kept, seconds = Pool(), 0, []
    try:
        for b in range(batches):
            exact, bands, sigs = synthetic_batch(rng, batch_docs, pool)
            k, s = publish_batch(index, b, exact, bands, sigs, rng)
            kept += k
            seconds.append(s)
            pool.add(exact[: batch_docs // 4], bands[: batch_docs // 4], sigs[: batch_docs // 4])
        with index.cursor() as cur:
            rels = relation_sizes(cur, schema)
            total = total_bytes(cur, schema)
    finally:
        index.close()
        if not keep:
            fresh_schema(url, schema)
    return {
        "batches": batches,
        "batch_docs": batch_docs,
        "kept_docs": kept,
        "total_bytes": total,
        "bytes_per_kept_doc": round(total / kept, 1),
        "batch_s_median": round(statistics.median(seconds), 3),
        "relations": [
            {"table": r.table, "relation": r.relation, "bytes": r.bytes, "per_doc": round(r.bytes / kept, 1)}
            for r in rels
        ],
    }


def print_sizes(sizes: dict) -> None:
    print(
        f"\n{sizes['batches']} batches x {sizes['batch_docs']} documents, {sizes['kept_docs']} kept: "
        f"{sizes['bytes_per_kept_doc']} bytes per kept document\n"
    )
    print_table(
        ["table", "relation", "bytes", "per kept doc"],
        ["l", "l", "r", "r"],
        [[r["table"], r["relation"], f"{r['bytes']:,}", f"{r['per_doc']:.1f}"] for r in sizes["relations"]],
    )


def bulk_load(url: str, schema_name: str, n: int, per_batch: int = 5000) -> float:
    """n kept documents of n / per_batch published batches, generated by the server (keys: hashint8extended of
    the row number, one seed per column; a 448-byte signature), indexes built after the load; returns seconds."""
    index = PostgresDedupIndex(url, schema=schema_name)
    started = time.perf_counter()
    cols = schema.key_columns(NUM_BANDS)
    with index.cursor() as cur:
        for c in cols:
            cur.execute(f"DROP INDEX IF EXISTS dedup_kept_{c}")
        cur.execute(
            "INSERT INTO dedup_attempts (attempt, batch_id, state, by_manifest) SELECT 'bulk-' || b || ':0', "
            "'bulk-' || b, 'published', true FROM generate_series(0, %s) b",
            ((n - 1) // per_batch,),
        )
        cur.execute("SELECT num, batch_id FROM dedup_attempts")
        nums = dict((b, a) for a, b in cur.fetchall())
        first = nums["bulk-0"]
        keys = ", ".join(f"hashint8extended(g, {s})" for s in range(len(cols)))
        cur.execute(
            f"INSERT INTO dedup_kept (id, {', '.join(cols)}, attempt, doc_id, signature) SELECT g, {keys}, "
            f"{first} + (g - 1) / {per_batch}, 'raw/cc/2024-10/part-' || lpad(((g - 1) / {per_batch})::text, 5, '0') || "
            "'.jsonl.zst#' || g, decode(repeat(md5(g::text), 28), 'hex') FROM generate_series(1, %s) g",
            (n,),
        )
        cur.execute("SELECT setval(pg_get_serial_sequence('dedup_kept', 'id'), %s)", (n + 1,))
    with index.cursor() as cur:
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute(schema.schema(NUM_BANDS))
    with index.cursor() as cur:
        cur.execute("ANALYZE")
    index.close()
    return time.perf_counter() - started


def pool_of(index: PostgresDedupIndex, n: int, rng, size: int = 20_000) -> Pool:
    """Published documents to duplicate, spread over the whole index."""
    ids = sorted(set(rng.integers(1, n + 1, size=size).tolist()))
    cols = schema.key_columns(NUM_BANDS)
    with index.cursor() as cur:
        cur.execute(f"SELECT {', '.join(cols)}, signature FROM dedup_kept WHERE id = ANY(%s)", (ids,))
        rows = cur.fetchall()
    pool = Pool()
    keys = np.array([r[:-1] for r in rows], dtype=np.int64).view(np.uint64)
    pool.add(keys[:, 0], keys[:, 1:], [np.frombuffer(bytes(r[-1]), dtype=np.uint32) for r in rows])
    return pool


def scale_part(url: str, sizes: list[int], repeats: int, batch_docs: int, keep: bool) -> list[dict]:
    out = []
    for n in sizes:
        name = f"bench_dedup_scale_{n}"
        fresh_schema(url, name)
        load_s = bulk_load(url, name, n)
        rng = np.random.default_rng(n)
        index = PostgresDedupIndex(url, schema=name)
        pool = pool_of(index, n, rng)
        lookups, commits, late = [], [], []
        for r in range(repeats):
            exact, bands, sigs = synthetic_batch(rng, batch_docs, pool)
            batch_id = batch_name(10**7 + r)
            index.begin_batch(batch_id)
            started = time.perf_counter()
            index.lookup_exact(exact)
            index.lookup_bands(bands)
            lookups.append(time.perf_counter() - started)
            kept, seconds = publish_batch(index, 10**7 + r, exact, bands, sigs, rng)
            commits.append(seconds)
            late.append(batch_docs - kept)
        with index.cursor() as cur:
            total = total_bytes(cur, name)
            cur.execute("SELECT count(*) FROM dedup_kept")
            docs = int(cur.fetchone()[0])
        index.close()
        if not keep:
            fresh_schema(url, name)
        out.append(
            {
                "documents": n,
                "load_s": round(load_s, 1),
                "bytes_per_doc": round(total / docs, 1),
                "total_bytes": total,
                "lookup_s_median": round(statistics.median(lookups), 3),
                "reserve_publish_s_median": round(statistics.median(commits), 3),
                "reserve_publish_s": [round(s, 3) for s in commits],
                "late_drops_median": statistics.median(late),
                "batch_docs": batch_docs,
            }
        )
        print(f"{n:>12,} documents: {out[-1]}", flush=True)
    return out


def print_scale(rows: list[dict]) -> None:
    base = rows[0]["reserve_publish_s_median"]
    print()
    print_table(
        ["documents", "bytes/doc", "lookups (s)", "reserve -> publish (s)", "vs smallest", "late drops", "load (s)"],
        ["r", "r", "r", "r", "r", "r", "r"],
        [
            [
                f"{r['documents']:,}",
                f"{r['bytes_per_doc']:.0f}",
                f"{r['lookup_s_median']:.3f}",
                f"{r['reserve_publish_s_median']:.3f}",
                f"{r['reserve_publish_s_median'] / base:.2f}x",
                f"{r['late_drops_median']:.0f}",
                f"{r['load_s']:.0f}",
            ]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=Settings().postgres_url)
    parser.add_argument("--batches", type=int, default=20, help="sizes: batches through the API")
    parser.add_argument("--batch-docs", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="*", default=[], help="scale: documents bulk-loaded")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale-batch-docs", type=int, default=3000)
    parser.add_argument("--keep", action="store_true", help="keep the schemas")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    result: dict = {"sizes": sizes_part(args.url, args.batches, args.batch_docs, args.keep)}
    print_sizes(result["sizes"])
    if args.sizes:
        result["scale"] = scale_part(args.url, args.sizes, args.repeats, args.scale_batch_docs, args.keep)
        print_scale(result["scale"])
    result["host"] = host(load_start)
    print("\n" + load_line(result))
    write(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
