"""The cleaning chain: read records in, kept / dropped / quarantined out, with per-step counts."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup_index import DedupIndex
from pipeline_project.cleaning.errors import CountsMismatchError
from pipeline_project.cleaning.records import DocState, Document, Dropped, Quarantined
from pipeline_project.cleaning.steps import (
    BoilerplateStrip,
    C4Quality,
    EncodingRepair,
    ExactDedup,
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
    LanguageID,
    MinHashDedup,
    NonEmpty,
    PIIMasking,
    RunContext,
    Step,
    StepStats,
)

log = logging.getLogger(__name__)


@dataclass
class CleaningResult:
    kept: list[Document] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    step_stats: list[StepStats] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    batch_id: str = ""
    pending_index: Any = None  # the index to commit to, until CleaningPipeline.commit ran

    def update_counts(self, n_in: int) -> None:
        self.counts = {
            "in": n_in,
            "kept": len(self.kept),
            "dropped": len(self.dropped),
            "quarantined": len(self.quarantined),
        }
        self.check_counts()

    def dropped_by_reason(self) -> dict[str, int]:
        """Counts keyed `step:reason` (the reason without its detail) and `quarantine:reason`."""
        counts: Counter = Counter(f"{d.step}:{d.reason.split(':', 1)[0]}" for d in self.dropped)
        counts.update(f"quarantine:{q.reason}" for q in self.quarantined)
        return dict(counts)

    def check_counts(self) -> None:
        c = self.counts
        if c["in"] != c["kept"] + c["dropped"] + c["quarantined"]:
            raise CountsMismatchError(f"cleaning lost documents: {c}")

    def removal_table_markdown(self) -> str:
        rows = [
            "| step | in | dropped | dropped % | modified | seconds | reasons |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for s in self.step_stats:
            pct = 100.0 * s.dropped / s.docs_in if s.docs_in else 0.0
            reasons = ", ".join(f"{r}: {c}" for r, c in s.reasons.most_common(6)) or "-"
            rows.append(
                f"| {s.name} | {s.docs_in} | {s.dropped} | {pct:.1f} | {s.modified} | {s.seconds:.2f} | {reasons} |"
            )
        c = self.counts
        rows.append(
            f"| **total** | {c.get('in', 0)} | {c.get('dropped', 0) + c.get('quarantined', 0)} | | | | kept {c.get('kept', 0)} |"
        )
        return "\n".join(rows)


def build_steps(config: CleaningConfig) -> list[Step]:
    """The chain in FineWeb's order; dedup before PII so masks never hide a duplicate."""
    c = config
    candidates: list[tuple[bool, callable]] = [
        (c.encoding.enabled, lambda: EncodingRepair(c.encoding)),
        (c.boilerplate.enabled, lambda: BoilerplateStrip(c.boilerplate)),
        (True, NonEmpty),
        (c.language.enabled, lambda: LanguageID(c.language)),
        (c.gopher_repetition.enabled, lambda: GopherRepetition(c.gopher_repetition)),
        (c.gopher_quality.enabled, lambda: GopherQuality(c.gopher_quality)),
        (c.c4.enabled, lambda: C4Quality(c.c4)),
        (c.fineweb.enabled, lambda: FineWebQuality(c.fineweb)),
        (c.dedup.exact.enabled, ExactDedup),
        (c.dedup.minhash.enabled, lambda: MinHashDedup(c.dedup.minhash)),
        (c.pii.enabled, lambda: PIIMasking(c.pii)),
    ]
    return [make() for enabled, make in candidates if enabled]


class CleaningPipeline:
    """The chain of steps. With a `pool` (`parallel.FilterPool`), the per-document filters run in its workers."""

    def __init__(self, config: CleaningConfig | None = None, pool: Any = None):
        self.config = config or CleaningConfig()
        self.steps = build_steps(self.config)
        self.pool = pool

    def run(
        self,
        items: Iterable[Document | Quarantined],
        batch_id: str,
        index: DedupIndex | None = None,
        commit: bool = True,
        force_index: bool = False,
    ) -> CleaningResult:
        """Clean one batch, looking duplicates up in `index` (read only).

        With `commit=True` the kept documents are then written to the index (`commit`). A caller that must
        check something before the index changes (has this batch been produced already?) passes
        `commit=False` and calls `commit(result)` itself; until then nothing is written (and the kept documents
        keep their dedup keys in `doc.state`).
        """
        docs: list[Document] = []
        quarantined: list[Quarantined] = []
        for item in items:
            (quarantined if isinstance(item, Quarantined) else docs).append(item)
        n_in = len(docs) + len(quarantined)
        read = StepStats("read", docs_in=n_in, dropped=len(quarantined), reasons=Counter(q.reason for q in quarantined))
        read.notes["encoding_converted"] = sum(
            1 for d in docs if d.meta.get("encoding", "utf-8") not in ("utf-8", "utf-8-sig")
        )
        result = CleaningResult(quarantined=quarantined, step_stats=[read], batch_id=batch_id)

        # force_index: `index` holds this batch's own earlier chunks too, and applies whatever the dedup scope
        ctx = RunContext(batch_id=batch_id, index=index, scope="global" if force_index else self.config.dedup.scope)
        if ctx.use_index:
            index.begin_batch(batch_id)  # a re-run of this batch replaces its own entries
            result.pending_index = index
        steps = self.steps
        if self.pool is not None and docs:
            docs, dropped, pool_stats = self.pool.run(docs, batch_id)
            result.dropped.extend(dropped)
            result.step_stats.extend(pool_stats)
            steps = steps[len(pool_stats) :]
        for step in steps:
            stats = StepStats(step.name, docs_in=len(docs))
            start = time.perf_counter()
            docs, dropped = step.run(docs, ctx, stats)
            stats.seconds = time.perf_counter() - start
            result.dropped.extend(dropped)
            result.step_stats.append(stats)
            log.info("%s: %d in, %d dropped in %.2fs", step.name, stats.docs_in, stats.dropped, stats.seconds)
        result.kept = docs
        result.update_counts(n_in)
        if commit:
            self.commit(result)
        return result

    def commit(self, result: CleaningResult) -> CleaningResult:
        """Write the kept documents to the index; documents another batch committed first move to `dropped`.

        Only documents that survived the whole chain become the originals later batches are compared with.
        """
        index, result.pending_index = result.pending_index, None
        if index is not None:
            docs = result.kept
            exact = np.array([d.state.exact_key or 0 for d in docs], dtype=np.uint64)
            sigs = np.zeros((len(docs), index.num_perm), dtype=np.uint32)
            bands = np.zeros((len(docs), index.num_bands), dtype=np.uint64)
            for i, d in enumerate(docs):
                mh = d.state.minhash
                if mh is not None:
                    sigs[i], bands[i] = mh
            stats = StepStats("index_commit", docs_in=len(docs))
            start = time.perf_counter()
            late = index.commit_batch(
                result.batch_id, [d.id for d in docs], exact, bands, sigs, near_threshold=self._near_threshold()
            )
            stats.seconds = time.perf_counter() - start
            if late:
                result.kept = [d for i, d in enumerate(docs) if i not in late]
                for i, reason in sorted(late.items()):
                    kind = reason.split("_of:", 1)[0]
                    stats.reasons[kind] += 1
                    result.dropped.append(Dropped.of(docs[i], "index_commit", reason))
                stats.dropped = len(late)
            result.step_stats.append(stats)
        for doc in result.kept:
            doc.state = DocState()
        result.update_counts(result.counts["in"])
        return result

    def _near_threshold(self) -> float:
        from pipeline_project.cleaning.steps.dedup import signature_threshold

        return signature_threshold(self.config.dedup.minhash)
