"""The per-document filters of the chain, run over a process pool.

Every step before deduplication judges one document at a time (repair, language ID, Gopher, C4, FineWeb),
and together they take about nine tenths of the cleaning time. `FilterPool` runs them in worker processes
over slices of a chunk, keeping document order, and returns what the in-process chain would: the kept
documents, the dropped ones with their reasons, and per-step counts (seconds are summed CPU seconds across
workers). Deduplication and PII masking stay in the calling process, in order, so decisions are identical.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.records import DocState, Document, Dropped
from pipeline_project.cleaning.steps import RunContext, Step, StepStats

_steps: list[Step] | None = None


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def filter_steps(config: CleaningConfig) -> list[Step]:
    """The steps of the chain that come before the first deduplication step."""
    from pipeline_project.cleaning.pipeline import build_steps
    from pipeline_project.cleaning.steps import ExactDedup, MinHashDedup

    steps = build_steps(config)
    first_dedup = next((i for i, s in enumerate(steps) if isinstance(s, ExactDedup | MinHashDedup)), len(steps))
    return steps[:first_dedup]


def _init(config_json: str) -> None:
    global _steps
    _steps = filter_steps(CleaningConfig.model_validate_json(config_json))
    # load the models (language ID, segmenter) now, not inside the first chunk's timing
    warm = Document(id="warm-up", text="The workers load their models before the first chunk. " * 20, source="")
    run_filters(_steps, [warm], "warm-up")


def run_filters(
    steps: list[Step], docs: list[Document], batch_id: str
) -> tuple[list[Document], list[Dropped], list[StepStats]]:
    ctx = RunContext(batch_id=batch_id)
    all_dropped: list[Dropped] = []
    all_stats = []
    for step in steps:
        stats = StepStats(step.name, docs_in=len(docs))
        start = time.process_time()
        docs, dropped = step.run(docs, ctx, stats)
        stats.seconds = time.process_time() - start
        all_dropped.extend(dropped)
        all_stats.append(stats)
    return docs, all_dropped, all_stats


def _work(args: tuple[list[Document], str]) -> tuple[list[Document], list[Dropped], list[StepStats]]:
    docs, batch_id = args
    kept, dropped, stats = run_filters(_steps, docs, batch_id)
    for doc in kept:
        doc.state = DocState()  # the words cache is not worth sending back
    return kept, dropped, stats


def merge_stats(parts: list[list[StepStats]]) -> list[StepStats]:
    merged: list[StepStats] = []
    for stats in parts:
        for i, s in enumerate(stats):
            if i == len(merged):
                merged.append(StepStats(s.name))
            m = merged[i]
            m.docs_in += s.docs_in
            m.dropped += s.dropped
            m.modified += s.modified
            m.seconds += s.seconds
            m.reasons.update(s.reasons)
            for k, v in s.notes.items():
                m.notes[k] = m.notes.get(k, 0) + v if isinstance(v, int | float) else v
    return merged


class FilterPool:
    """`workers` processes, each with its own copy of the filter steps (models load once per worker)."""

    def __init__(self, config: CleaningConfig, workers: int):
        self.workers = workers
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            # spawn, not fork: the caller may be a threaded Dagster run worker
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init,
            initargs=(config.model_dump_json(),),
        )

    def run(self, docs: list[Document], batch_id: str) -> tuple[list[Document], list[Dropped], list[StepStats]]:
        if not docs:
            return [], [], []
        n_slices = min(len(docs), self.workers * 4)  # several slices per worker evens out uneven documents
        bounds = [len(docs) * k // n_slices for k in range(n_slices + 1)]
        slices = [(docs[a:b], batch_id) for a, b in zip(bounds, bounds[1:]) if b > a]
        kept: list[Document] = []
        dropped: list[Dropped] = []
        stats_parts = []
        for part_kept, part_dropped, part_stats in self._executor.map(_work, slices):
            kept.extend(part_kept)
            dropped.extend(part_dropped)
            stats_parts.append(part_stats)
        merged = merge_stats(stats_parts)
        order = {s.name: i for i, s in enumerate(merged)}
        dropped.sort(key=lambda d: order[d.step])  # as the in-process chain lists them: step by step
        return kept, dropped, merged

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> FilterPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
