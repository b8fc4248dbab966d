"""A CPU-time budget per document, so that no input can stall a batch.

Two guards, one per kind of runaway work:

- In the thread that runs the filters (a pool worker's main thread, or the caller's main thread when there is no
  pool), `cpu_budget` arms a `setitimer(ITIMER_PROF)` timer; when the process has used the document's budget of
  CPU time, SIGPROF raises `DocumentTimeout` there. That interrupts Python code and regular-expression matching
  (CPython's `re` checks for signals while it backtracks), and the document is quarantined `processing_timeout`.
- C code that never checks for signals cannot be interrupted that way: a pool's parent watches each worker's CPU
  time per document (`workers.py`) and kills the worker at `hard_limit`; the document is quarantined and the
  worker replaced.

A signal handler can only be set from the main thread, so a pipeline called from another thread runs its filters
in a pool of one worker instead (`pipeline.CleaningPipeline`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline_project.cleaning.errors import CleaningError
from pipeline_project.cleaning.records import Document, Quarantined

TIMEOUT_REASON = "processing_timeout"
CRASH_REASON = "worker_crashed"


class DocumentTimeout(CleaningError):
    """A document used up its CPU-time budget."""


def can_interrupt() -> bool:
    """Whether `cpu_budget` works here: on the main thread of a platform with `setitimer`."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def hard_limit(budget: float) -> float:
    """CPU seconds after which a pool kills a worker stuck in one document (C code the timer cannot interrupt)."""
    return 2 * budget + 1.0


def _expire(signum, frame) -> None:
    raise DocumentTimeout("CPU-time budget used up")


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Raise DocumentTimeout in this (main) thread once this process has used `seconds` more of CPU time."""
    previous = signal.signal(signal.SIGPROF, _expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def timeout_record(doc: Document, budget: float, reason: str = TIMEOUT_REASON) -> Quarantined:
    what = "used up its CPU budget" if reason == TIMEOUT_REASON else "crashed its filter worker"
    return Quarantined(doc.id, doc.source, reason, f"{what} of {budget:.1f} s")
