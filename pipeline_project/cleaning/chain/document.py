"""The per-document part of every profile's chain (`DocumentFilters`), run in process or over a process pool.

Every step before deduplication judges one document at a time (repair, language ID, Gopher, C4, FineWeb, the
code filters). `pool.FilterPool` routes each document to its profile and runs those steps in worker processes
over slices of a chunk, and returns what the in-process chain would: per profile the kept documents with
their batch positions, the dropped ones with their reasons, and per-step counts (seconds are summed CPU
seconds across workers). Deduplication and masking decide in the calling process, in order, so decisions
are identical; but their per-document work (hashes, MinHash signatures, PII and secret masks) and the masking
of dropped text for the exclusion sink are done ahead here (each step's `prepare`), so the calling process, which
every chunk passes through, only looks up and decides.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

from pipeline_project.cleaning.chain.budget import DocumentTimeout, cpu_budget, timeout_record
from pipeline_project.cleaning.chain.profiles import (
    Positioned,
    ProfileRouter,
    build_chains,
    run_filter_stage,
    split_at_dedup,
)
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.config.profiles import PROFILE_NAMES
from pipeline_project.cleaning.records import SINK_MASK, DocState, Document, Dropped, Quarantined
from pipeline_project.cleaning.steps import Step, StepStats
from pipeline_project.cleaning.steps.base import prepare_ahead
from pipeline_project.common.container import usable_workers

FilterOutput = tuple[dict[str, Positioned], list[Dropped], list[StepStats], list[Quarantined]]

# StepStats.notes key of the per-step stats a worker sends for the work it did ahead; `take_ahead` folds them
AHEAD = "ahead"
ChainsFactory = Callable[[CleaningConfig], dict[str, list[Step]]]


def default_workers(memory_per_worker_mb: int = 1024) -> int:
    """One worker per CPU the container's quota allows (not the node's cores), as many as its memory limit holds
    at `memory_per_worker_mb` each (`container.usable_workers`)."""
    return usable_workers(memory_per_worker_mb << 20)


def sink_mask(text: str, config: CleaningConfig, domain: str | None = None) -> str:
    """`text` as the exclusion sink stores it (`publish.exclusion_records_of`): masked as profile `domain` masks."""
    from pipeline_project.cleaning.chain.sink_mask import sink_mask as masked

    return masked(text, config, domain)


class DocumentFilters:
    """The per-document work of every profile's chain, one document at a time, each under its CPU budget.

    Per document: route it, run its profile's filters, and do ahead the per-document work of the later steps
    (hashes, signatures, PII and secret masks) and the exclusion sink's mask of a dropped text. A document that
    runs out of budget (`budget.py`) is quarantined `processing_timeout`; the others are not affected. A pool
    worker holds one; so does a `CleaningPipeline` without a pool.
    """

    def __init__(self, config: CleaningConfig, chains_factory: ChainsFactory = build_chains):
        self.config = config
        split = {name: split_at_dedup(steps) for name, steps in chains_factory(config).items()}
        self.chains = {name: parts[0] for name, parts in split.items()}
        self.post = {name: parts[1] for name, parts in split.items()}  # run later, by the caller
        self.router = ProfileRouter(config, self.chains)
        self.warmed = False

    def warm(self) -> None:
        """Load the models (language ID, segmenter) now, not inside the first chunk's timing."""
        warm = [
            Document(id="warm-up", text="The workers load their models before the first chunk. " * 20, source=""),
            Document(id="warm-up-zh", text="工作进程在处理第一批文档之前先加载它们的模型。" * 20, source=""),
        ]
        run_filter_stage(self.router, self.chains, warm, "warm-up")
        self.warmed = True

    def run(
        self,
        docs: list[Document],
        batch_id: str,
        offset: int = 0,
        budgeted: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> FilterOutput:
        """The output for `docs` (batch positions from `offset`); `progress(i)` is called before document i."""
        if budgeted and docs and not self.warmed:  # model loading is not the first document's work
            self.warm()
        parts: list[FilterOutput] = []
        late: list[Quarantined] = []
        limits = self.config.limits
        for i, doc in enumerate(docs):
            if progress is not None:
                progress(i)
            try:
                with cpu_budget(limits.document_budget(doc.text)) if budgeted else contextlib.nullcontext():
                    parts.append(self._one(doc, batch_id, offset + i))
            except DocumentTimeout:
                self.router.forget()
                late.append(timeout_record(doc, limits.document_budget(doc.text)))
        kept, dropped, stats, _ = merge_outputs(parts)
        return kept, dropped, stats, late

    def _one(self, doc: Document, batch_id: str, position: int) -> FilterOutput:
        kept, dropped, stats = run_filter_stage(
            self.router, self.chains, [doc], batch_id, position, clock=time.process_time
        )
        for name, items in kept.items():
            steps = self.post[name]
            start = time.process_time()
            for _, kept_doc in items:
                # the words cache is not worth sending back; the quality signals go to the attribute file
                kept_doc.state = DocState(signals=kept_doc.state.signals)
                prepare_ahead(steps, kept_doc)
                # the profile's masking step (PIIMasking, or SecretsMasking for code) masks as the sink does
                ahead = kept_doc.state.prepared.get("pii") or kept_doc.state.prepared.get("secrets")
                masked = ahead[1][0] if ahead is not None else sink_mask(kept_doc.text, self.config, name)
                kept_doc.state.prepared[SINK_MASK] = (kept_doc.text, masked)
            seconds = (time.process_time() - start) / max(len(steps), 1)  # shared evenly: one clock for all
            stats += [StepStats(s.name, seconds=seconds, profile=name, notes={AHEAD: 1}) for s in steps]
        dropped = [
            dataclasses.replace(d, masked_text=sink_mask(d.text, self.config, d.meta.get("domain"))) for d in dropped
        ]
        return kept, dropped, stats, []


def take_ahead(stats: list[StepStats]) -> tuple[list[StepStats], dict[tuple[str, str], float]]:
    """Split the workers' stats into the filters' and the seconds spent ahead on each later step."""
    ahead: dict[tuple[str, str], float] = {}
    rest = []
    for s in stats:
        if s.notes.get(AHEAD):
            ahead[(s.profile, s.name)] = ahead.get((s.profile, s.name), 0.0) + s.seconds
        else:
            rest.append(s)
    return rest, ahead


def merge_stats(parts: list[list[StepStats]]) -> list[StepStats]:
    """Sum the workers' stats step by step: profile_select first, then each profile's steps in chain order."""
    merged: dict[tuple[str, str], StepStats] = {}
    for stats in parts:
        for s in stats:
            m = merged.get((s.profile, s.name))
            if m is None:
                m = merged[(s.profile, s.name)] = StepStats(s.name, profile=s.profile)
            m.absorb(s)
    rank = {name: i for i, name in enumerate(("", *PROFILE_NAMES))}
    return sorted(merged.values(), key=lambda s: rank.get(s.profile, len(rank)))  # stable: chain order kept


def merge_outputs(parts: list[FilterOutput]) -> FilterOutput:
    """The outputs of consecutive slices of a chunk (in chunk order) as one."""
    kept: dict[str, Positioned] = {}
    dropped: list[Dropped] = []
    quarantined: list[Quarantined] = []
    for part_kept, part_dropped, _, part_quarantined in parts:
        for name, items in part_kept.items():
            kept.setdefault(name, []).extend(items)
        dropped.extend(part_dropped)
        quarantined.extend(part_quarantined)
    merged = merge_stats([stats for _, _, stats, _ in parts])
    order = {(s.profile, s.name): i for i, s in enumerate(merged)}
    # as the in-process chain lists them: profile by profile, step by step
    dropped.sort(key=lambda d: order[(d.meta.get("domain", ""), d.step)])
    return {name: kept[name] for name in PROFILE_NAMES if name in kept}, dropped, merged, quarantined
