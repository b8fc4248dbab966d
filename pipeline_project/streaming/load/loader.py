"""Kafka topic of token blocks -> ready `torch.LongTensor` batches, with exact resume and DDP.

Usage (the trainer's contract)::

    cfg = LoaderConfig(kafka=KafkaSettings(bootstrap_servers=...), topic="token-blocks",
                       seq_len=256, batch_size=8, rank=0, world_size=1)
    loader = KafkaBlockLoader(cfg)
    for batch in loader:            # int64 [batch_size, seq_len]
        ...
        ckpt["loader"] = loader.state_dict()
    loader.close()

What it guarantees (assignment, bounded and streaming modes, resume under another world size, padding,
dead letters, failures) is written down in docs/loader.md, "The loader's contract". Where the blocks come from
is the loader's block source (`block_source.py`): the plain interleave, or the domain mixture that
`mixture_loader.make_loader` picks when `cfg.mixture` is set.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import DeadLetterLimitError, MalformedMessageError, StateError
from pipeline_project.streaming.load.assembler import End
from pipeline_project.streaming.load.assignment import shares_for_rank
from pipeline_project.streaming.load.block_source import BlockSource, PlainInterleave, SourceContext
from pipeline_project.streaming.load.config import LoaderConfig, dead_letter_topic_for
from pipeline_project.streaming.load.dead_letters import LINEAGE_STATE_KEY, DeadLetter, DeadLetterSink, LineageBudget
from pipeline_project.streaming.load.preflight import (
    SkippedRange,
    check_cursors,
    describe_topic,
    list_offsets,
    partition_bounds,
)
from pipeline_project.streaming.load.state import Cursor, gather_state, parse_cursors, resolve_state, same_layout
from pipeline_project.streaming.retractions.feed import RetractionFeed
from pipeline_project.streaming.retractions.index import Retracted
from pipeline_project.streaming.retractions.topic import RetractionReader

log = logging.getLogger(__name__)

__all__ = [
    "KafkaBlockLoader",
    "LoaderConfig",
    "MalformedMessageError",
    "StateError",
    "dead_letter_topic_for",
    "gather_state",
]


def agreed_partitions(cfg: LoaderConfig, found: tuple[int, ...], topic_id: str) -> tuple[tuple[int, ...], str]:
    """The partitions this rank lays out: those of the count the ranks agreed on (`cfg.partitions`), so that every
    rank builds the same table whatever it lists now; a topic that has fewer is refused."""
    if cfg.partitions is None:
        return found, topic_id
    if len(found) < cfg.partitions:
        raise StateError(f"topic {cfg.topic!r} has {len(found)} partitions, the job agreed on {cfg.partitions}")
    return tuple(p for p in found if p < cfg.partitions), topic_id


class KafkaBlockLoader:
    """Iterable of `torch.LongTensor [batch_size, seq_len]` read from a Kafka topic of token blocks."""

    def __init__(self, cfg: LoaderConfig, source: Callable[[SourceContext], BlockSource] = PlainInterleave):
        """`source` makes the block source from this rank's context: `PlainInterleave` (the plain interleave), or
        `mixture_loader.DomainMixture` (`mixture_loader.make_loader` picks by `cfg.mixture`)."""
        self.cfg = cfg
        self._admin = admin = cfg.kafka.make_admin()
        self.all_partitions, self.topic_id = agreed_partitions(
            cfg, *describe_topic(admin, cfg.topic, cfg.metadata_timeout_s)
        )
        by_worker = shares_for_rank(
            self.all_partitions, rank=cfg.rank, world_size=cfg.world_size, num_workers=cfg.num_workers
        )
        self.workers = {w: tuple(s.partition for s in ss) for w, ss in by_worker.items()}
        self.shares = {s.partition: s for ss in by_worker.values() for s in ss}  # partition -> this rank's stripe
        self.partitions = tuple(sorted(self.shares))
        self.pin = cfg.pin_memory if cfg.pin_memory is not None else torch.cuda.is_available()

        self.dead_letters: list[DeadLetter] = []  # skipped malformed messages, as delivered
        self.data_loss: list[SkippedRange] = []  # deleted offsets skipped by allow_data_loss
        self._pad_delivered = 0
        self._end_offsets = self._bounded_end_offsets(admin)
        self._stop = threading.Event()
        self._retractions = (
            RetractionFeed(RetractionReader(cfg.kafka, cfg.topic, cfg.metadata_timeout_s), cfg.retraction_refresh_s)
            if cfg.retractions
            else None
        )
        self.source = source(
            SourceContext(
                cfg,
                self.topic_id,
                len(self.all_partitions),
                self.workers,
                self.shares,
                self._end_offsets,
                self._first_cursors(admin),
                self.pin,
                self._stop,
                self._retractions,
            )
        )
        self._delivered_state = self.source.snapshot()  # position after the last batch returned by __next__

        self._thread: threading.Thread | None = None
        self._queue: queue.Queue | None = None
        self._dead_letter_sink: DeadLetterSink | None = None
        if cfg.dead_letter_topic:
            self._dead_letter_sink = DeadLetterSink(
                cfg.kafka, cfg.dead_letter_topic, source_topic=cfg.topic, timeout_s=cfg.metadata_timeout_s
            )  # creates the topic with the first dead letter
        self._lineage = LineageBudget(cfg.max_dead_letters, cfg.rank)
        self._finished = False
        self.trace: list[tuple[int, int, int]] = []
        self.retracted: list[Retracted] = []  # blocks passed over as retracted, as delivered (cleared by its reader)
        self.retracted_total = 0

        self._wait_total = 0.0
        self._wait_window = 0.0
        self._window_start = time.perf_counter()
        self.last_wait_s = 0.0
        self.blocks_delivered = 0

    def _bounded_end_offsets(self, admin) -> dict[int, int] | None:
        """Where a bounded loader stops: the configured end offsets, else the partitions' ends now."""
        cfg = self.cfg
        if cfg.mode != "bounded":
            return None
        if cfg.end_offsets is not None:
            return {p: int(cfg.end_offsets[p]) for p in self.partitions}
        return list_offsets(admin, cfg.topic, self.partitions, OffsetSpec.latest(), cfg.metadata_timeout_s)

    def _first_cursors(self, admin) -> dict[int, Cursor]:
        """The start offsets asked for, checked against the partitions' bounds; the earliest for the rest."""
        cfg = self.cfg
        low, high = partition_bounds(admin, cfg.topic, self.partitions, cfg.metadata_timeout_s)
        start = {p: Cursor(low[p]) for p in self.partitions}
        explicit = {p: Cursor(int(off)) for p, off in (cfg.start_offsets or {}).items() if p in start}
        checked, skipped = check_cursors(cfg.topic, explicit, low=low, high=high, allow_data_loss=cfg.allow_data_loss)
        self._record_data_loss(skipped)
        return {**start, **checked}

    # -- public API ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[torch.Tensor]:
        if self._thread is None and not self._finished:
            self._start()
        return self

    def __next__(self) -> torch.Tensor:
        if self._finished:
            raise StopIteration
        if self._thread is None:
            self._start()
        t0 = time.perf_counter()
        item = self._queue.get()
        waited = time.perf_counter() - t0
        self.last_wait_s = waited
        self._wait_total += waited
        self._wait_window += waited
        if isinstance(item, End):
            if item.state is not None:
                self._delivered_state = item.state
            self._account(item)
            self._finished = True
            self._join()
            raise StopIteration
        if isinstance(item, BaseException):
            self._finished = True
            self._join()
            if isinstance(item, DeadLetterLimitError):
                self._lineage.explain(item)
            raise item
        self._delivered_state = item.state
        self._account(item)
        self.blocks_delivered += self.cfg.batch_size
        self._pad_delivered += item.pad_tokens
        if item.trace is not None:
            self.trace.extend(item.trace)
        self.retracted.extend(item.retracted)
        self.retracted_total += len(item.retracted)
        tensor = item.tensor
        if self.cfg.device != "cpu":
            tensor = tensor.to(self.cfg.device, non_blocking=self.pin)
        return tensor

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch returned by `__next__` (prefetched batches are not counted)."""
        state = dict(self._delivered_state)
        state["partitions"] = {k: dict(v) for k, v in state["partitions"].items()}
        state[LINEAGE_STATE_KEY] = self._lineage.carry(len(self.dead_letters))
        return state

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Seek to a saved position: this rank's state, every rank's states, or a merged state.

        With the same rank/layout/seed the interleave continues exactly; otherwise the loader starts from
        the union of the states' positions (the source's `merge`: `state.merge_states`, or per domain
        `mixture_loader.merge_mixture_states`) and the interleave restarts from the seed.
        """
        cfg = self.cfg
        self._lineage.load(state, len(self.dead_letters))
        state, own = resolve_state(state, self._fits, self.source.merge)
        parse_cursors(state, topic=cfg.topic, topic_id=self.topic_id)
        bounds = partition_bounds(self._admin, cfg.topic, self.partitions, cfg.metadata_timeout_s)
        plan = self.source.plan_seek(state, own, bounds)
        self._stop_prefetch()
        self._record_data_loss(plan.skipped)
        self.source.seek(plan)
        self._delivered_state = self.source.snapshot()
        self._finished = False

    def _fits(self, state: Mapping[str, Any]) -> bool:
        """Is `state` this rank's own, saved under this layout (world size, workers, seed, partitions, stripes)?"""
        cfg = self.cfg
        return same_layout(
            state,
            rank=cfg.rank,
            world_size=cfg.world_size,
            num_workers=cfg.num_workers,
            seed=cfg.seed,
            shares=self.shares,
        )

    def metrics(self) -> dict[str, Any]:
        """Wait, lag and loss figures; `data_wait_fraction` covers the wall time since the previous call.

        `tokens_delivered` counts real tokens (padding excluded); `dead_letters` the malformed messages
        skipped (records in `loader.dead_letters`); `data_loss_offsets` the deleted offsets skipped by
        `allow_data_loss` (records in `loader.data_loss`); `retracted_blocks` the blocks passed over as retracted.
        """
        now = time.perf_counter()
        wall = now - self._window_start
        fraction = self._wait_window / wall if wall > 0 else 0.0
        self._wait_window = 0.0
        self._window_start = now
        lag = self._lag()
        return {
            "data_wait_s_total": self._wait_total,
            "data_wait_s_last": self.last_wait_s,
            "data_wait_fraction": fraction,
            "lag": lag,
            "lag_total": sum(lag.values()),
            "blocks_delivered": self.blocks_delivered,
            "tokens_delivered": self.blocks_delivered * self.cfg.seq_len - self._pad_delivered,
            "pad_tokens_delivered": self._pad_delivered,
            "dead_letters": len(self.dead_letters),
            "dead_letters_lineage": self._lineage.lineage(len(self.dead_letters)),
            "data_loss_offsets": sum(s.offsets for s in self.data_loss),
            "retracted_blocks": self.retracted_total,
            **self.source.metrics(),
        }

    @property
    def end_offsets(self) -> dict[int, int] | None:
        return dict(self._end_offsets) if self._end_offsets is not None else None

    def close(self) -> None:
        self._stop_prefetch()
        if self._retractions is not None:
            self._retractions.close()
            self._retractions = None
        if self._dead_letter_sink is not None:
            self._dead_letter_sink.close()
            self._dead_letter_sink = None

    def __enter__(self) -> KafkaBlockLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _account(self, item: Any) -> None:
        """Count what the assembler skipped on the way to a delivered item."""
        for letter in item.dead_letters:
            log.warning(
                "skipped malformed message %s[%d]@%d: %s", letter.topic, letter.partition, letter.offset, letter.reason
            )
            if self._dead_letter_sink is not None:
                self._dead_letter_sink.send(letter)
            self.dead_letters.append(DeadLetter(letter.topic, letter.partition, letter.offset, letter.reason))
        self._record_data_loss(item.skipped)
        self.source.account(item)

    def _record_data_loss(self, skipped: Sequence[SkippedRange]) -> None:
        for s in skipped:
            log.warning(
                "%s[%d]: skipped %d deleted offsets [%d, %d) (allow_data_loss)",
                self.cfg.topic,
                s.partition,
                s.offsets,
                s.first,
                s.low,
            )
            self.data_loss.append(s)

    def _lag(self) -> dict[int, int]:
        """Log end (last fetched high watermark, else the start-time end offset) minus delivered position; a stripe
        of k counts its 1/k share, so the ranks' lags add up to the partition's."""
        highs = {p: h for r in self.source.readers for p, h in r.high_watermarks().items()}
        cursors = self._delivered_state["partitions"]
        lag = {}
        for p in self.partitions:
            pos = int(cursors[str(p)]["offset"])
            high = highs.get(p, (self._end_offsets or {}).get(p, pos))
            lag[p] = -(-max(0, high - pos) // self.shares[p].stripes)
        return lag

    def _start(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.cfg.prefetch)
        items = self.source.start(self._lineage.remaining(len(self.dead_letters)))
        self._thread = threading.Thread(target=self._run, args=(items,), daemon=True, name=self.source.thread_name)
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():
                try:  # unblock a producer waiting on a full queue
                    self._queue.get_nowait()
                except queue.Empty:
                    self._thread.join(0.05)
            self._thread = None
        for r in self.source.readers:
            r.close()

    def _stop_prefetch(self) -> None:
        self._join()
        self.source.restore(self._delivered_state)  # prefetched batches are thrown away
        self._finished = False

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, items: Iterator[Any]) -> None:
        try:
            for item in items:
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread, raised by __next__
            self._put(exc)
