"""Exact and MinHash-LSH near-duplicate removal, within the batch and against earlier batches."""

from __future__ import annotations

import numpy as np
import xxhash
from rensa import RMinHash

from pipeline_project.cleaning.config import MinHashConfig
from pipeline_project.cleaning.records import Document, Dropped
from pipeline_project.cleaning.steps.base import RunContext, Step, StepStats, doc_lang
from pipeline_project.cleaning.text import CJK_LANGS, normalize_for_exact, simplify

EXACT_KEY = "_exact_key"
MINHASH_KEY = "_minhash"  # (signature uint32[num_perm], band keys uint64[num_bands])


def exact_key(text: str) -> int:
    return xxhash.xxh3_64_intdigest(normalize_for_exact(text).encode("utf-8"))


class ExactDedup(Step):
    name = "exact_dedup"

    def run(self, docs, ctx: RunContext, stats: StepStats):
        keys = np.fromiter((exact_key(d.text) for d in docs), dtype=np.uint64, count=len(docs))
        earlier = ctx.index.lookup_exact(keys) if ctx.use_index else np.full(len(docs), -1)
        seen: dict[int, str] = {}
        kept, dropped = [], []
        for doc, key, hit in zip(docs, keys.tolist(), earlier.tolist()):
            if hit >= 0:
                reason = f"exact_duplicate_of:{ctx.index.entry(hit)}"
            elif key in seen:
                reason = f"exact_duplicate_of:{ctx.batch_id}/{seen[key]}"
            else:
                seen[key] = doc.id
                doc.__dict__[EXACT_KEY] = key
                kept.append(doc)
                continue
            stats.reasons["exact_duplicate"] += 1
            dropped.append(Dropped.of(doc, self.name, reason))
        stats.dropped += len(dropped)
        return kept, dropped


class MinHasher:
    """5-gram word shingles of DataTrove-normalized text, rensa R-MinHash, xxh3 band keys."""

    def __init__(self, cfg: MinHashConfig):
        self.cfg = cfg
        self.num_perm = cfg.num_buckets * cfg.hashes_per_bucket

    def shingles(self, text: str, lang: str) -> list[str]:
        simple = simplify(text)
        if self.cfg.cjk_char_shingles and lang in CJK_LANGS:
            tokens = [c for c in simple if not c.isspace()]
        else:
            tokens = simple.split()
        n = self.cfg.n_grams
        return [" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]

    def signature(self, text: str, lang: str) -> tuple[np.ndarray, np.ndarray] | None:
        shingles = self.shingles(text, lang)
        if not shingles:
            return None
        mh = RMinHash(num_perm=self.num_perm, seed=self.cfg.seed)
        mh.update(shingles)
        sig = np.asarray(mh.digest(), dtype=np.uint32)
        rows = sig.reshape(self.cfg.num_buckets, self.cfg.hashes_per_bucket)
        bands = np.fromiter(
            # seed with the band number so equal rows in different bands never collide; 0 means "no band"
            (xxhash.xxh3_64_intdigest(row.tobytes(), seed=b) or 1 for b, row in enumerate(rows)),
            dtype=np.uint64,
            count=self.cfg.num_buckets,
        )
        return sig, bands


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # the earlier document stays the root, so it is the one kept
            self.parent[max(ra, rb)] = min(ra, rb)


class MinHashDedup(Step):
    """LSH on 14 bands x 8 rows; documents sharing a band are linked, connected components keep one member.
    A component linked to a document of an earlier batch keeps none (that batch already has the text)."""

    name = "minhash_dedup"

    def __init__(self, cfg: MinHashConfig):
        self.cfg = cfg
        self.hasher = MinHasher(cfg)

    def _similar(self, a: np.ndarray, b: np.ndarray) -> bool:
        return self.cfg.verify_jaccard is None or float(np.mean(a == b)) >= self.cfg.verify_jaccard

    def run(self, docs: list[Document], ctx: RunContext, stats: StepStats):
        n = len(docs)
        sigs: list[np.ndarray | None] = [None] * n
        bands = np.zeros((n, self.cfg.num_buckets), dtype=np.uint64)
        for i, doc in enumerate(docs):
            result = self.hasher.signature(doc.text, doc_lang(doc))
            if result is not None:
                sigs[i], bands[i] = result
                doc.__dict__[MINHASH_KEY] = result
        has_sig = np.array([s is not None for s in sigs], dtype=bool)
        stats.notes["no_shingles"] = int((~has_sig).sum())

        uf = _UnionFind(n)
        first_with_band: dict[int, int] = {}
        for i in np.flatnonzero(has_sig).tolist():
            for key in bands[i].tolist():
                j = first_with_band.setdefault(key, i)
                if j != i and self._similar(sigs[i], sigs[j]):
                    uf.union(i, j)

        earlier: dict[int, object] = {}  # component root -> earlier-batch entry
        if ctx.use_index and has_sig.any():
            hits = ctx.index.lookup_bands(bands)
            for i in np.flatnonzero(has_sig).tolist():
                for entry in hits[i][hits[i] >= 0].tolist():
                    if self._similar(sigs[i], ctx.index.signatures[entry]):
                        earlier.setdefault(uf.find(i), ctx.index.entry(entry))
                        break

        kept, dropped = [], []
        for i, doc in enumerate(docs):
            root = uf.find(i)
            if root in earlier:
                reason = f"near_duplicate_of:{earlier[root]}"
            elif root != i:
                reason = f"near_duplicate_of:{ctx.batch_id}/{docs[root].id}"
            else:
                kept.append(doc)
                continue
            stats.reasons["near_duplicate"] += 1
            dropped.append(Dropped.of(doc, self.name, reason))
        stats.dropped += len(dropped)
        return kept, dropped
