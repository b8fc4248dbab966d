"""Drop the documents that a takedown request put on the blocklist (`dedup.blocklist`): reason `blocked:<request>`.

The step runs right before exact dedup, in the calling process, only when the cleaning is given a blocklist
(`RunContext.blocklist`). It looks the chunk up once: each document's exact key and MinHash signature, computed as
the dedup steps compute them (and left in `doc.state.prepared` for them, so nothing is hashed twice).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline_project.cleaning.config import MinHashConfig
from pipeline_project.cleaning.records import Document, Dropped
from pipeline_project.cleaning.steps.base import RunContext, Step, StepStats, prepared
from pipeline_project.cleaning.steps.dedup import ExactDedup, MinHashDedup, exact_key, signature_threshold


def _share(step: Step, doc: Document, value: Any) -> None:
    """Leave `value` where `prepared(step, doc, ...)` finds it for the document's current text."""
    doc.state.prepared = {**(doc.state.prepared or {}), step.name: (doc.text, value)}


BLOCKED = "blocked"  # the drop reason: blocked:<request>


class Blocked(Step):
    name = "takedown_blocklist"

    def __init__(self, cfg: MinHashConfig, exact: ExactDedup | None = None, minhash: MinHashDedup | None = None):
        self.exact = exact or ExactDedup()
        self.minhash = minhash or MinHashDedup(cfg)
        self.num_bands = cfg.num_buckets
        self.threshold = signature_threshold(cfg)

    def run(self, docs: list[Document], ctx: RunContext, stats: StepStats):
        if ctx.blocklist is None or not docs:
            return docs, []
        n = len(docs)
        exact = np.zeros(n, dtype=np.uint64)
        bands = np.zeros((n, self.num_bands), dtype=np.uint64)
        sigs: list[np.ndarray | None] = [None] * n
        for i, doc in enumerate(docs):
            exact[i] = key = prepared(self.exact, doc, lambda doc=doc: exact_key(doc.text))
            keyed = prepared(self.minhash, doc, lambda doc=doc: self.minhash.prepare(doc))
            _share(self.exact, doc, key)
            _share(self.minhash, doc, keyed)
            if keyed is not None:
                sigs[i], bands[i] = keyed
        requests = ctx.blocklist.match(exact, bands, sigs, self.threshold)
        kept, dropped = [], []
        for doc, request in zip(docs, requests):
            if request is None:
                kept.append(doc)
                continue
            stats.reasons[BLOCKED] += 1
            dropped.append(Dropped.of(doc, self.name, f"{BLOCKED}:{request}"))
        stats.dropped += len(dropped)
        return kept, dropped
