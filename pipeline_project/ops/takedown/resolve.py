"""A takedown's target -> the texts to look for, their dedup keys, and their copies in the corpus.

Keys are computed as the cleaning computes them at its dedup steps: the exact key and the MinHash signature and
band keys (`cleaning.steps.dedup`) of the text as given and of the text as each active profile's per-document
steps rewrite it (encoding repair, boilerplate; their drop decisions are ignored: a takedown looks for the text
whatever a filter would say). A kept copy is a document of the dedup index with an equal exact key, or one sharing
a band whose signature estimate reaches `signature_threshold` (the rule the cleaning applies to near duplicates of
earlier batches). A dropped copy is a document of a batch's exclusion sink whose drop reason names a kept copy, or
whose text has an equal exact key or a near signature (its text there is the masked one).
"""

from __future__ import annotations

import copy as copying
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline_project.cleaning.config import CleaningConfig, MinHashConfig
from pipeline_project.cleaning.dedup.index import DedupLookup
from pipeline_project.cleaning.output.attributes import duplicate_of
from pipeline_project.cleaning.records import Document
from pipeline_project.cleaning.steps import DocFilter
from pipeline_project.cleaning.steps.dedup import MinHasher, exact_key, signature_threshold


@dataclass(frozen=True)
class Fingerprint:
    origin: str  # what the text came from: "text", a document id
    exact: int
    signature: np.ndarray | None  # None: too short for one shingle
    bands: np.ndarray | None


@dataclass(frozen=True)
class Copy:
    batch: str
    doc_id: str
    kind: str  # "exact" | "near"
    similarity: float  # signature estimate against the closest fingerprint (1.0 for an exact copy)
    state: str  # "kept" | "dropped"
    reason: str = ""  # a dropped copy's drop reason
    signature: np.ndarray | None = None  # a kept copy's, from the index (for the blocklist)

    @property
    def ref(self) -> str:
        return f"{self.batch}/{self.doc_id}"


def dedup_views(text: str, config: CleaningConfig, lang: str | None = None) -> list[tuple[str, str]]:
    """(lang, text) as the dedup steps of each active profile would see it, the text as given first; distinct."""
    from pipeline_project.cleaning.chain.profiles import filter_chains

    views = {(lang or "en", text): None}
    for steps in filter_chains(config).values():
        doc = Document(id="takedown", text=text, source="takedown", meta={"lang": lang} if lang else {})
        for step in steps:
            if isinstance(step, DocFilter) and step.name != "decontaminate":
                probe = copying.copy(doc)
                step.check(probe)  # a drop is ignored; a rewrite of the text is kept
                doc.text, doc.meta = probe.text, probe.meta
        views[(doc.meta.get("lang") or "en", doc.text)] = None
    return list(views)


def fingerprints(texts: Iterable[tuple[str, str]], config: CleaningConfig) -> list[Fingerprint]:
    """(origin, text) -> the distinct fingerprints of every dedup view of each text."""
    hasher = MinHasher(config.dedup.minhash)
    out: dict[tuple[int, bytes], Fingerprint] = {}
    for origin, text in texts:
        for lang, view in dedup_views(text, config):
            keyed = hasher.signature(view, lang)
            sig, bands = keyed if keyed is not None else (None, None)
            key = (exact_key(view), b"" if sig is None else sig.tobytes())
            out.setdefault(key, Fingerprint(origin, key[0], sig, bands))
    return list(out.values())


def estimate(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None or len(a) != len(b):
        return 0.0
    return float(np.mean(np.asarray(a) == np.asarray(b)))


def kept_copies(index: DedupLookup, prints: Sequence[Fingerprint], cfg: MinHashConfig) -> list[Copy]:
    """The index's documents that are exact or near copies of any fingerprint, each once (its closest match)."""
    if not prints:
        return []
    threshold = signature_threshold(cfg)
    exact_hits = index.lookup_exact(np.array([p.exact for p in prints], dtype=np.uint64)).reshape(-1)
    bands = np.array(
        [p.bands if p.bands is not None else np.zeros(cfg.num_buckets, np.uint64) for p in prints], dtype=np.uint64
    )
    band_hits = index.lookup_bands(bands)
    found: dict[str, Copy] = {}
    for p, hit, row in zip(prints, exact_hits.tolist(), band_hits):
        candidates = [(hit, "exact")] if hit >= 0 else []
        candidates += [(int(e), "near") for e in dict.fromkeys(row[row >= 0].tolist())]
        for number, kind in candidates:
            entry, sig = index.entry(number), index.signature(number)
            similarity = 1.0 if kind == "exact" else estimate(p.signature, sig)
            if kind == "near" and similarity < threshold:
                continue
            copy = Copy(entry.batch_id, entry.doc_id, kind, similarity, "kept", signature=sig)
            held = found.get(copy.ref)
            if held is None or _rank(copy) > _rank(held):
                found[copy.ref] = copy
    return sorted(found.values(), key=lambda c: (c.batch, c.doc_id))


def _rank(copy: Copy) -> tuple[bool, float]:
    return copy.kind == "exact", copy.similarity


def dropped_copies(
    records: Iterable[tuple[str, dict]], kept: Sequence[Copy], prints: Sequence[Fingerprint], config: CleaningConfig
) -> list[Copy]:
    """Exclusion-sink records (batch, record) that are copies: a duplicate of a kept copy by its drop reason, or a
    text whose exact key equals a fingerprint's or whose signature estimate reaches the threshold."""
    cfg = config.dedup.minhash
    threshold = signature_threshold(cfg)
    hasher = MinHasher(cfg)
    targets = {c.ref for c in kept}
    exact = {p.exact for p in prints}
    out = []
    for batch, rec in records:
        if rec.get("kind") != "dropped":
            continue
        reason = str(rec.get("reason") or "")
        dup = duplicate_of(reason)
        if dup is not None and dup[0] in targets:
            out.append(Copy(batch, str(rec["id"]), dup[1], 1.0 if dup[1] == "exact" else 0.0, "dropped", reason))
            continue
        text = str(rec.get("text") or "")
        if exact_key(text) in exact:
            out.append(Copy(batch, str(rec["id"]), "exact", 1.0, "dropped", reason))
            continue
        keyed = hasher.signature(text, "en")
        best = max((estimate(keyed[0], p.signature) for p in prints), default=0.0) if keyed else 0.0
        if best >= threshold:
            out.append(Copy(batch, str(rec["id"]), "near", best, "dropped", reason))
    return out
