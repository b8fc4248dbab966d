"""The per-document part of every profile's chain, run over a process pool.

Every step before deduplication judges one document at a time (repair, language ID, Gopher, C4, FineWeb, the
code filters). `FilterPool` routes each document to its profile and runs those steps in worker processes
over slices of a chunk, and returns what the in-process chain would: per profile the kept documents with
their batch positions, the dropped ones with their reasons, and per-step counts (seconds are summed CPU
seconds across workers). Deduplication and masking decide in the calling process, in order, so decisions
are identical; but their per-document work (hashes, MinHash signatures, PII and secret masks) and the masking
of dropped text for the exclusion sink are done ahead here (each step's `prepare`), so the calling process, which
every chunk passes through, only looks up and decides.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.profile_config import PROFILE_NAMES
from pipeline_project.cleaning.profiles import (
    Positioned,
    ProfileRouter,
    build_chains,
    filter_chains,
    run_filter_stage,
    split_at_dedup,
)
from pipeline_project.cleaning.records import SINK_MASK, DocState, Document, Dropped
from pipeline_project.cleaning.steps import Step, StepStats
from pipeline_project.cleaning.steps.base import prepare_ahead
from pipeline_project.cleaning.steps.pii import mask_pii

FilterOutput = tuple[dict[str, Positioned], list[Dropped], list[StepStats]]

_router: ProfileRouter | None = None
_chains: dict[str, list[Step]] | None = None
_post: dict[str, list[Step]] | None = None  # per profile, the steps after the filters (run by the caller)
_config: CleaningConfig | None = None

# StepStats.notes key of the per-step stats a worker sends for the work it did ahead; `take_ahead` folds them
AHEAD = "ahead"


def default_workers() -> int:
    """One worker per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def filter_steps(config: CleaningConfig) -> dict[str, list[Step]]:
    """Per profile, the steps of its chain that come before the first deduplication step."""
    return filter_chains(config)


def _init(config_json: str) -> None:
    global _router, _chains, _post, _config
    _config = CleaningConfig.model_validate_json(config_json)
    split = {name: split_at_dedup(steps) for name, steps in build_chains(_config).items()}
    _chains = {name: parts[0] for name, parts in split.items()}
    _post = {name: parts[1] for name, parts in split.items()}
    _router = ProfileRouter(_config, _chains)
    # load the models (language ID, segmenter) now, not inside the first chunk's timing
    warm = [
        Document(id="warm-up", text="The workers load their models before the first chunk. " * 20, source=""),
        Document(id="warm-up-zh", text="工作进程在处理第一批文档之前先加载它们的模型。" * 20, source=""),
    ]
    run_filter_stage(_router, _chains, warm, "warm-up")


def sink_mask(text: str, config: CleaningConfig) -> str:
    """`text` as the exclusion sink stores it (`publish.exclusion_records_of`)."""
    return mask_pii(text, config.pii)[0] if config.pii.enabled else text


def _work(args: tuple[list[Document], str, int]) -> FilterOutput:
    docs, batch_id, offset = args
    kept, dropped, stats = run_filter_stage(_router, _chains, docs, batch_id, offset, clock=time.process_time)
    for name, items in kept.items():
        steps = _post[name]
        start = time.process_time()
        for _, doc in items:
            doc.state = DocState()  # the words cache is not worth sending back
            prepare_ahead(steps, doc)
            pii = doc.state.prepared.get("pii")  # PIIMasking masks with config.pii, as the sink does
            masked = pii[1][0] if pii is not None else sink_mask(doc.text, _config)
            doc.state.prepared[SINK_MASK] = (doc.text, masked)
        seconds = (time.process_time() - start) / max(len(steps), 1)  # shared evenly: one clock for all
        stats += [StepStats(s.name, seconds=seconds, profile=name, notes={AHEAD: 1}) for s in steps]
    dropped = [dataclasses.replace(d, masked_text=sink_mask(d.text, _config)) for d in dropped]
    return kept, dropped, stats


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


def _merge(parts: list[FilterOutput]) -> FilterOutput:
    kept: dict[str, Positioned] = {}
    dropped: list[Dropped] = []
    for part_kept, part_dropped, _ in parts:
        for name, items in part_kept.items():
            kept.setdefault(name, []).extend(items)
        dropped.extend(part_dropped)
    merged = merge_stats([stats for _, _, stats in parts])
    order = {(s.profile, s.name): i for i, s in enumerate(merged)}
    # as the in-process chain lists them: profile by profile, step by step
    dropped.sort(key=lambda d: order[(d.meta.get("domain", ""), d.step)])
    return {name: kept[name] for name in PROFILE_NAMES if name in kept}, dropped, merged


class FilterPool:
    """`workers` processes, each with its own router and copy of the filter steps (models load once per worker)."""

    def __init__(self, config: CleaningConfig, workers: int):
        self.workers = workers
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            # spawn, not fork: the caller may be a threaded Dagster run worker
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init,
            initargs=(config.model_dump_json(),),
        )

    def run(self, docs: list[Document], batch_id: str) -> FilterOutput:
        return self.submit(docs, batch_id)()

    def submit(self, docs: list[Document], batch_id: str) -> Callable[[], FilterOutput]:
        """Queue `docs` on the workers now; the returned call waits for them and merges their output.

        The caller may read and submit the next chunk, or deduplicate the previous one, while the workers run."""
        if not docs:
            return lambda: ({}, [], [])
        n_slices = min(len(docs), self.workers * 4)  # several slices per worker evens out uneven documents
        bounds = [len(docs) * k // n_slices for k in range(n_slices + 1)]
        futures = [self._executor.submit(_work, (docs[a:b], batch_id, a)) for a, b in zip(bounds, bounds[1:]) if b > a]
        return lambda: _merge([f.result() for f in futures])

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> FilterPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
