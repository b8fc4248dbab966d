"""Text batches read ahead by a background thread, so reading overlaps tokenization.

Contract of `prefetch_batches`: the batches hold the input texts in order, `batch_docs` each (the
last may be short); at most `depth` batches wait in the queue (`depth` 0 reads inline, no thread);
an exception raised while reading is re-raised to the consumer; closing the generator stops the
reader thread.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any


def prefetch_batches(texts: Iterable[str], batch_docs: int, depth: int) -> Iterator[list[str]]:
    """Batches of `batch_docs` texts, read ahead by a background thread (up to `depth` batches).

    Reading (S3 I/O, decompression) then overlaps tokenization, whose Rust batch call releases
    the GIL. An exception in the reader is re-raised here; closing the generator stops the reader.
    """
    if depth <= 0:
        it = iter(texts)
        while batch := list(itertools.islice(it, batch_docs)):
            yield batch
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def reader() -> None:
        try:
            it = iter(texts)
            while not stop.is_set() and (batch := list(itertools.islice(it, batch_docs))):
                put(("batch", batch))
            put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread
            put(("error", exc))

    thread = threading.Thread(target=reader, name="text-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, payload = q.get()
            if kind == "batch":
                yield payload
            elif kind == "error":
                raise payload
            else:
                return
    finally:
        stop.set()
        thread.join(timeout=5)
