"""Exact and MinHash-LSH near-duplicate removal, within the batch and against earlier batches."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xxhash
from rensa import RMinHash

from pipeline_project.cleaning.config import MinHashConfig
from pipeline_project.cleaning.records import Document, Dropped
from pipeline_project.cleaning.steps.base import RunContext, Step, StepStats, doc_lang, prepared
from pipeline_project.cleaning.steps.text import CJK_LANGS, normalize_for_exact, simplify


def exact_key(text: str) -> int:
    return xxhash.xxh3_64_intdigest(normalize_for_exact(text).encode("utf-8"))


class ExactDedup(Step):
    name = "exact_dedup"

    def prepare(self, doc: Document) -> int:
        return exact_key(doc.text)

    def run(self, docs, ctx: RunContext, stats: StepStats):
        keys = np.fromiter(
            (prepared(self, d, lambda d=d: exact_key(d.text)) for d in docs), dtype=np.uint64, count=len(docs)
        )
        earlier = ctx.index.lookup_exact(keys) if ctx.use_index else np.full(len(docs), -1)
        seen: dict[int, str] = ctx.chunk_state.setdefault(self.name, {})  # exact key -> id of the kept document
        kept, dropped = [], []
        for doc, key, hit in zip(docs, keys.tolist(), earlier.tolist()):
            if hit >= 0:
                reason = f"exact_duplicate_of:{ctx.index.entry(hit)}"
            elif key in seen:
                reason = f"exact_duplicate_of:{ctx.batch_id}/{seen[key]}"
            else:
                seen[key] = doc.id
                doc.state.exact_key = key
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
        return sig, band_keys(sig, self.cfg)


def band_keys(sig: np.ndarray, cfg: MinHashConfig) -> np.ndarray:
    """The LSH band keys of a signature: one xxh3 per band of `hashes_per_bucket` values."""
    rows = np.asarray(sig, dtype=np.uint32).reshape(cfg.num_buckets, cfg.hashes_per_bucket)
    return np.fromiter(
        # seed with the band number so equal rows in different bands never collide; 0 means "no band"
        (xxhash.xxh3_64_intdigest(row.tobytes(), seed=b) or 1 for b, row in enumerate(rows)),
        dtype=np.uint64,
        count=cfg.num_buckets,
    )


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted, de-duplicated shingle-hash arrays."""
    if a.size == 0 and b.size == 0:
        return 0.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def signature_threshold(cfg: MinHashConfig) -> float:
    """Lowest signature-estimated Jaccard accepted as a near-duplicate when the texts are not at hand.

    The estimate (fraction of equal MinHash values) has standard deviation sqrt(J(1-J)/num_perm), 0.043 at
    J=0.7 with 112 values, so a pair exactly at the threshold reads below it half of the time. Accepting
    estimates down to `signature_margin_sd` standard deviations below the threshold keeps >= 97.7% of the
    LSH-found pairs at or above it, and still rejects the chance band collisions of much less similar text.
    """
    t = cfg.jaccard_threshold
    return t - cfg.signature_margin_sd * float(np.sqrt(t * (1 - t) / (cfg.num_buckets * cfg.hashes_per_bucket)))


@dataclass
class _ChunkBands:
    """What MinHashDedup has seen of one chunk, across the profiles' chains."""

    docs: list[Document] = field(default_factory=list)
    sigs: list[np.ndarray | None] = field(default_factory=list)
    # band key -> representatives of the chunk's documents seen with it (an ordered set), so a band shared by
    # thousands of copies of one text costs one lookup, not thousands
    band_reps: dict[int, dict[tuple[str, int], None]] = field(default_factory=dict)
    shingles: dict[int, np.ndarray] = field(default_factory=dict)  # exact shingle sets, by document number


class MinHashDedup(Step):
    """LSH on 14 bands x 8 rows finds candidates; a document is dropped only when it is itself similar to a
    representative that is kept (in this batch or an earlier one).

    Documents are taken in batch order. Each one collects candidate representatives: earlier-batch documents
    sharing a band with it, and the representative of every earlier document of this batch sharing a band
    with it (so a copy that collides only with another copy is still compared with their original), the
    documents that other profiles' chains took before it in this chunk included. With
    `verify="exact"` (default) a candidate of this batch counts when the exact Jaccard of the two shingle
    sets is >= `jaccard_threshold`; earlier-batch candidates, whose text is not kept, count when the
    signature-estimated Jaccard is >= `signature_threshold(cfg)`. With `verify="signature"` both use the
    estimate; with `verify="none"` every LSH candidate counts (DataTrove's rule; a document joins the first
    cluster it collides with, where connected components would also merge two clusters it touches).
    A document with no such representative is kept and becomes one. Unlike connected components, a chain
    A~B~C does not drop C unless C itself is similar to the kept A: transitive chains were what put
    dissimilar documents into one cluster.
    """

    name = "minhash_dedup"

    def __init__(self, cfg: MinHashConfig):
        self.cfg = cfg
        self.hasher = MinHasher(cfg)
        self.sig_threshold = signature_threshold(cfg)

    def _shingle_set(self, doc: Document, cache: dict[int, np.ndarray], i: int) -> np.ndarray:
        got = cache.get(i)
        if got is None:
            shingles = self.hasher.shingles(doc.text, doc_lang(doc))
            got = np.unique(
                np.fromiter(
                    (xxhash.xxh3_64_intdigest(s.encode("utf-8")) for s in shingles),
                    dtype=np.uint64,
                    count=len(shingles),
                )
            )
            cache[i] = got
        return got

    def prepare(self, doc: Document) -> tuple[np.ndarray, np.ndarray] | None:
        return self.hasher.signature(doc.text, doc_lang(doc))

    def run(self, docs: list[Document], ctx: RunContext, stats: StepStats):
        sigs, bands, has_sig = self._signatures(docs)
        stats.notes["no_shingles"] = int((~has_sig).sum())
        hits = ctx.index.lookup_bands(bands) if ctx.use_index and has_sig.any() else None
        # this chunk's documents so far, of every profile's chain: a document is compared with the ones other
        # profiles kept too, by its number `base + i` in `chunk.docs`
        chunk: _ChunkBands = ctx.chunk_state.setdefault(self.name, _ChunkBands())
        base = len(chunk.docs)
        chunk.docs.extend(docs)
        chunk.sigs.extend(sigs)
        # representative of each document: ("batch", number) for a document of this chunk, ("index", entry) else
        rep: list[tuple[str, int] | None] = [None] * len(docs)
        tally = _Tally()
        for i in np.flatnonzero(has_sig).tolist():
            g = base + i
            keys = bands[i].tolist()
            earlier, local = _candidates(keys, None if hits is None else hits[i], chunk.band_reps)
            # an earlier batch already holds the text: name it first
            best = self._best_earlier(g, earlier, chunk, ctx, tally)
            if best is None:
                best = self._best_local(g, local, chunk, tally)
            rep[i] = best or ("batch", g)
            for key in keys:
                chunk.band_reps.setdefault(key, {})[rep[i]] = None
        stats.notes["candidates_checked"] = tally.checked
        stats.notes["candidates_rejected"] = tally.rejected
        return self._split(docs, rep, base, chunk, ctx, stats)

    def _signatures(self, docs: list[Document]) -> tuple[list[np.ndarray | None], np.ndarray, np.ndarray]:
        """Each document's signature (None without shingles), its band keys (0 without) and which have one."""
        n = len(docs)
        sigs: list[np.ndarray | None] = [None] * n
        bands = np.zeros((n, self.cfg.num_buckets), dtype=np.uint64)
        for i, doc in enumerate(docs):
            result = prepared(self, doc, lambda doc=doc: self.prepare(doc))
            if result is not None:
                sigs[i], bands[i] = result
                doc.state.minhash = result
        return sigs, bands, np.array([s is not None for s in sigs], dtype=bool)

    def _best_earlier(
        self, g: int, earlier: list[int], chunk: _ChunkBands, ctx: RunContext, tally: _Tally
    ) -> tuple[str, int] | None:
        """The most similar earlier-batch candidate that passes (signature estimate)."""
        best: tuple[str, int] | None = None
        best_sim = -1.0
        for entry in earlier:
            tally.checked += 1
            sim = 1.0 if self.cfg.verify == "none" else _estimate(chunk, g, ctx.index.signature(entry))
            if sim >= self.sig_threshold or self.cfg.verify == "none":
                if sim > best_sim:
                    best, best_sim = ("index", entry), sim
            else:
                tally.rejected += 1
        return best

    def _best_local(self, g: int, local: list[int], chunk: _ChunkBands, tally: _Tally) -> tuple[str, int] | None:
        """The most similar candidate of this chunk that passes `cfg.verify`."""
        best: tuple[str, int] | None = None
        best_sim = -1.0
        for r in sorted(local):
            tally.checked += 1
            sim, ok = self._local_similarity(g, r, chunk)
            if ok and sim > best_sim:
                best, best_sim = ("batch", r), sim
            elif not ok:
                tally.rejected += 1
        return best

    def _local_similarity(self, g: int, r: int, chunk: _ChunkBands) -> tuple[float, bool]:
        cfg = self.cfg
        if cfg.verify == "none":
            return 1.0, True
        if cfg.verify == "signature":
            sim = _estimate(chunk, g, chunk.sigs[r])
            return sim, sim >= self.sig_threshold
        sim = jaccard(
            self._shingle_set(chunk.docs[g], chunk.shingles, g),
            self._shingle_set(chunk.docs[r], chunk.shingles, r),
        )
        return sim, sim >= cfg.jaccard_threshold

    def _split(self, docs, rep, base: int, chunk: _ChunkBands, ctx: RunContext, stats: StepStats):
        kept, dropped = [], []
        for i, doc in enumerate(docs):
            kind, r = rep[i] or ("batch", base + i)
            if kind == "index":
                reason = f"near_duplicate_of:{ctx.index.entry(r)}"
            elif r != base + i:
                reason = f"near_duplicate_of:{ctx.batch_id}/{chunk.docs[r].id}"
            else:
                kept.append(doc)
                continue
            stats.reasons["near_duplicate"] += 1
            dropped.append(Dropped.of(doc, self.name, reason))
        stats.dropped += len(dropped)
        return kept, dropped


@dataclass
class _Tally:
    checked: int = 0
    rejected: int = 0


def _estimate(chunk: _ChunkBands, g: int, other: np.ndarray) -> float:
    """Signature-estimated Jaccard of the chunk's document `g` and `other`."""
    return float(np.mean(chunk.sigs[g] == other))


def _candidates(
    keys: list[int], hits: np.ndarray | None, band_reps: dict[int, dict[tuple[str, int], None]]
) -> tuple[list[int], list[int]]:
    """Earlier-batch entries (index hits first) and this chunk's representatives sharing a band with `keys`."""
    earlier: list[int] = []
    local: list[int] = []
    if hits is not None:
        earlier = list(dict.fromkeys(hits[hits >= 0].tolist()))
    for key in keys:
        for kind, r in band_reps.get(key, ()):
            if kind == "index":
                if r not in earlier:
                    earlier.append(r)
            elif r not in local:
                local.append(r)
    return earlier, local
