"""`FilterPool`: worker processes that run `parallel.DocumentFilters` over slices of a chunk, and replace a worker
that a document stalls.

Each worker is a spawned process (spawn, not fork: the caller may be a threaded Dagster run worker) with its own
router and copy of the filter steps (models load once per worker). A monitor thread in the calling process hands
each idle worker the next slice, collects the outputs, and watches the workers:

- a document over its CPU budget is quarantined by the worker itself (`budget.cpu_budget`); the worker finishes
  its slice, returns it, and exits, and a fresh worker takes its place;
- a worker that has spent `budget.hard_limit` CPU seconds on one document (C code that the timer cannot
  interrupt) is killed, and one that dies is replaced; that document is quarantined (`processing_timeout`, or
  `worker_crashed`), and the documents of its slice before and after it are queued again.

So no document can stall a batch, and every document comes back kept, dropped or quarantined.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import psutil

from pipeline_project.cleaning.chain.budget import CRASH_REASON, hard_limit, timeout_record
from pipeline_project.cleaning.chain.document import ChainsFactory, DocumentFilters, FilterOutput, merge_outputs
from pipeline_project.cleaning.chain.profiles import build_chains
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.records import Document

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.1
_MAX_RESTARTS = 2


def _serve(conn, at, config_json: str, chains_factory: ChainsFactory) -> None:
    """A worker: filter the slices it is sent until it is sent None; exit after a slice that had a timeout."""
    filters = DocumentFilters(CleaningConfig.model_validate_json(config_json), chains_factory)
    filters.warm()

    def progress(i: int) -> None:
        at.value = i

    while (task := conn.recv()) is not None:
        docs, batch_id, offset = task
        try:
            out = filters.run(docs, batch_id, offset, progress=progress)
        except Exception as exc:  # noqa: BLE001 - a bug in a step: the caller's batch fails with it
            at.value = -1
            conn.send(("error", exc))
            continue
        at.value = -1
        conn.send(("ok", out))
        if out[3]:
            return


@dataclass
class _Chunk:
    """The slices of one submitted chunk, and their outputs by offset."""

    pending: int = 0
    outputs: list[tuple[int, FilterOutput]] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def add(self, offset: int, out: FilterOutput | None, error: BaseException | None = None) -> None:
        if out is not None:
            self.outputs.append((offset, out))
        self.error = self.error or error
        self.pending -= 1
        if self.pending == 0:
            self.done.set()


@dataclass
class _Task:
    chunk: _Chunk
    docs: list[Document]
    batch_id: str
    offset: int
    restarts: int = 0  # times a worker died before its first document of this task


class _Worker:
    def __init__(self, mp, config_json: str, chains_factory: ChainsFactory):
        self.conn, child = mp.Pipe()
        self.at = mp.RawValue("q", -1)
        self.process = mp.Process(target=_serve, args=(child, self.at, config_json, chains_factory), daemon=True)
        self.process.start()
        child.close()
        self.ps = psutil.Process(self.process.pid)
        self.task: _Task | None = None
        self.seen: tuple[int, float] = (-1, 0.0)  # (document index, worker CPU seconds when first seen there)

    def cpu_seconds(self) -> float:
        try:
            t = self.ps.cpu_times()
        except psutil.Error:
            return 0.0
        return t.user + t.system

    def stop(self, kill: bool = False) -> None:
        if kill or not self.process.is_alive():
            self.process.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class FilterPool:
    """`workers` processes running the per-document filters; documents that stall one are quarantined."""

    def __init__(self, config: CleaningConfig, workers: int, chains_factory: ChainsFactory = build_chains):
        self.workers = workers
        self.config = config
        self.replaced = 0  # workers replaced after a timeout or a crash
        self._mp = multiprocessing.get_context("spawn")
        self._start = lambda: _Worker(self._mp, config.model_dump_json(), chains_factory)
        self._pool = [self._start() for _ in range(workers)]
        self._queue: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._monitor = threading.Thread(target=self._loop, name="filter-pool", daemon=True)
        self._monitor.start()

    def run(self, docs: list[Document], batch_id: str) -> FilterOutput:
        return self.submit(docs, batch_id)()

    def submit(self, docs: list[Document], batch_id: str) -> Callable[[], FilterOutput]:
        """Queue `docs` on the workers now; the returned call waits for them and merges their output.

        The caller may read and submit the next chunk, or deduplicate the previous one, while the workers run."""
        if not docs:
            return lambda: ({}, [], [], [])
        n_slices = min(len(docs), self.workers * 4)  # several slices per worker evens out uneven documents
        bounds = [len(docs) * k // n_slices for k in range(n_slices + 1)]
        chunk = _Chunk(pending=n_slices)
        for a, b in zip(bounds, bounds[1:]):
            self._queue.put(_Task(chunk, docs[a:b], batch_id, a))
        return lambda: self._collect(chunk)

    def _collect(self, chunk: _Chunk) -> FilterOutput:
        while not chunk.done.wait(1.0):
            if not self._monitor.is_alive():
                raise RuntimeError("the filter pool's monitor thread stopped")
        if chunk.error is not None:
            raise chunk.error
        return merge_outputs([out for _, out in sorted(chunk.outputs, key=lambda item: item[0])])

    # ---- the monitor thread ------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed.is_set():
            self._dispatch()
            busy = {w.conn: w for w in self._pool if w.task is not None}
            if not busy:
                self._closed.wait(_POLL_SECONDS)
                continue
            for conn in wait(list(busy), timeout=_POLL_SECONDS):
                self._receive(busy[conn])
            for w in list(self._pool):
                if w.task is not None:
                    self._watch(w)

    def _dispatch(self) -> None:
        for w in self._pool:
            if w.task is None and not self._queue.empty():
                task = self._queue.get()
                w.task, w.seen = task, (-1, 0.0)
                with contextlib.suppress(OSError):  # it died while idle: the next look at it replaces it
                    w.conn.send((task.docs, task.batch_id, task.offset))

    def _receive(self, w: _Worker) -> None:
        task = w.task
        try:
            kind, payload = w.conn.recv()
        except (EOFError, OSError):
            self._lost(w, CRASH_REASON)
            return
        w.task = None
        task.chunk.add(task.offset, payload if kind == "ok" else None, payload if kind == "error" else None)
        if kind == "ok" and payload[3]:  # it quarantined a document for time and exits: replace it
            self._replace(w, kill=False)

    def _watch(self, w: _Worker) -> None:
        if not w.process.is_alive():
            self._lost(w, CRASH_REASON)
            return
        index, cpu = w.at.value, w.cpu_seconds()
        if index < 0:
            return
        if index != w.seen[0]:
            w.seen = (index, cpu)
            return
        doc = w.task.docs[index]
        if cpu - w.seen[1] > hard_limit(self.config.limits.document_budget(doc.text)):
            self._lost(w, None)

    def _lost(self, w: _Worker, reason: str | None) -> None:
        """The worker is stuck or dead in its task: quarantine the document it was at, queue the rest again."""
        task, index = w.task, w.at.value
        w.task = None
        self._replace(w, kill=True)
        if index < 0 or index >= len(task.docs):  # not inside a document: the whole slice goes again
            task.restarts += 1
            if task.restarts > _MAX_RESTARTS:
                task.chunk.add(task.offset, None, RuntimeError("filter workers die before their first document"))
            else:
                self._queue.put(task)
            return
        doc = task.docs[index]
        budget = self.config.limits.document_budget(doc.text)
        record = timeout_record(doc, budget) if reason is None else timeout_record(doc, budget, reason)
        log.warning("filter worker replaced: document %s quarantined (%s)", doc.id, record.reason)
        chunk = task.chunk
        pieces = [(task.docs[:index], task.offset), (task.docs[index + 1 :], task.offset + index + 1)]
        pieces = [(docs, offset) for docs, offset in pieces if docs]
        chunk.pending += len(pieces)
        for docs, offset in pieces:
            self._queue.put(_Task(chunk, docs, task.batch_id, offset))
        chunk.add(task.offset + index, ({}, [], [], [record]))

    def _replace(self, w: _Worker, kill: bool) -> None:
        w.stop(kill=kill)
        self._pool[self._pool.index(w)] = self._start()
        self.replaced += 1

    def close(self) -> None:
        self._closed.set()
        self._monitor.join()
        for w in self._pool:
            w.stop(kill=w.task is not None)

    def __enter__(self) -> FilterPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
