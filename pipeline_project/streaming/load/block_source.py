"""Where a `KafkaBlockLoader`'s batches come from: the block-source strategy the loader owns.

The loader keeps what every source shares: the topic and this rank's layout (`SourceContext`), the prefetch
thread and its queue, dead letters, data loss, the lineage budget and the wait and lag figures. The source
keeps the readers, the position and how batches are assembled from them. Two sources:

* `PlainInterleave`: one seeded interleave over the rank's partitions (state format 3 of `state.py`);
* `mixture_loader.DomainMixture`: one stream per domain, drawn at the configured proportions.

The protocol (`BlockSource`), driven by the loader:

* `snapshot()`: the state of the source's position now (between batches), as `state_dict()` returns it;
* `restore(state)`: rewind to a state this source took (prefetched batches are thrown away);
* `plan_seek(state, own, bounds)` then `seek(plan)`: move to a saved state (`own`: this rank's, same layout);
  the plan is checked against the log before the loader stops its prefetch thread;
* `start(budget)`: open the readers at the position and return the batch generator the thread drains;
* `account(item)`: count what came with a delivered item beyond dead letters and data loss;
* `metrics()`: figures added to `loader.metrics()`; `merge(states)`: several ranks' states as one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline_project.streaming.load.assembler import Batch, BatchAssembler, End
from pipeline_project.streaming.load.config import LoaderConfig
from pipeline_project.streaming.load.partition_reader import PartitionReader
from pipeline_project.streaming.load.preflight import SkippedRange
from pipeline_project.streaming.load.seek import checked_starts
from pipeline_project.streaming.load.state import Cursor, Interleaver, make_state, merge_states
from pipeline_project.streaming.load.stripes import Share, Skips
from pipeline_project.streaming.retractions.index import RetractedBlocks

Starts = tuple[dict[int, Cursor], dict[int, Skips], list[SkippedRange]]  # `seek.checked_starts`


@dataclass(frozen=True)
class SourceContext:
    """What the loader resolved for this rank, shared with its source: config, layout, bounds, stop event."""

    cfg: LoaderConfig
    topic_id: str | None
    topic_partitions: int
    workers: Mapping[int, tuple[int, ...]]  # worker -> its partitions
    shares: Mapping[int, Share]  # partition -> this rank's stripe
    end_offsets: Mapping[int, int] | None  # None: streaming mode
    start_cursors: Mapping[int, Cursor]  # where the loader was built to start
    pin: bool
    stop: threading.Event
    retractions: RetractedBlocks | None = None  # what the assembler passes over (`streaming/retractions`)

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(sorted(self.shares))

    def live(self, cursors: Mapping[int, Cursor]) -> set[int]:
        """Partitions not yet at their end offset (all of them in streaming mode)."""
        if self.end_offsets is None:
            return set(self.partitions)
        return {p for p in self.partitions if cursors[p].offset < self.end_offsets[p]}

    def reader(self, worker: int, partitions: Sequence[int], *, suffix: str = "", **extra: Any) -> PartitionReader:
        cfg = self.cfg
        return PartitionReader(
            cfg.kafka,
            cfg.topic,
            partitions,
            worker=worker,
            client_id=f"{cfg.kafka.client_id}.r{cfg.rank}w{worker}{suffix}",
            seq_len=cfg.seq_len,
            expected_tokenizer_hash=cfg.expected_tokenizer_hash,
            end_offsets=self.end_offsets,
            consume_messages=cfg.consume_messages,
            max_buffered_messages=cfg.max_buffered_messages,
            allow_data_loss=cfg.allow_data_loss,
            shares=self.shares,
            **extra,
        )

    def assembler(self, readers: Sequence[PartitionReader], snapshot: Any, cls: type = BatchAssembler) -> Any:
        cfg = self.cfg
        return cls(
            readers,
            topic=cfg.topic,
            batch_size=cfg.batch_size,
            seq_len=cfg.seq_len,
            end_offsets=self.end_offsets,
            idle_timeout_s=cfg.idle_timeout_s,
            stall_timeout_s=cfg.stall_timeout_s,
            poll_timeout_s=cfg.poll_timeout_s,
            trace=cfg.trace,
            pin_memory=self.pin,
            snapshot=snapshot,
            stop=self.stop,
            allow_data_loss=cfg.allow_data_loss,
            retractions=self.retractions,
        )

    def checked_starts(self, entries: Mapping[str, Any], own: bool, bounds: Any) -> Starts:
        """`seek.checked_starts` for this rank's shares; unnamed partitions start where the loader was built."""
        return checked_starts(
            self.cfg.topic,
            entries,
            self.shares,
            own=own,
            bounds=bounds,
            defaults=self.start_cursors,
            allow_data_loss=self.cfg.allow_data_loss,
        )

    def state(
        self, cursors: Mapping[int, Cursor], current: int | None, interleave: Any, skips: Mapping[int, Skips] | None
    ) -> dict[str, Any]:
        """`state.make_state` for this rank's layout."""
        cfg = self.cfg
        return make_state(
            topic=cfg.topic,
            topic_id=self.topic_id,
            rank=cfg.rank,
            world_size=cfg.world_size,
            num_workers=cfg.num_workers,
            seed=cfg.seed,
            cursors=cursors,
            current=current,
            interleave=interleave,
            shares=self.shares,
            skips=skips,
            topic_partitions=self.topic_partitions,
        )


@dataclass
class SeekPlan:
    """A saved state resolved for this rank: the checked starts per stream (key None: the plain interleave)."""

    state: Mapping[str, Any]
    own: bool
    starts: dict[Any, Starts] = field(default_factory=dict)

    @property
    def skipped(self) -> list[SkippedRange]:
        return [s for _, _, skipped in self.starts.values() for s in skipped]


class BlockSource(Protocol):
    readers: Sequence[PartitionReader]
    thread_name: str

    def merge(self, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]: ...
    def snapshot(self) -> dict[str, Any]: ...
    def restore(self, state: Mapping[str, Any]) -> None: ...
    def plan_seek(self, state: Mapping[str, Any], own: bool, bounds: Any) -> SeekPlan: ...
    def seek(self, plan: SeekPlan) -> None: ...
    def start(self, budget: int) -> Iterator[Batch | End]: ...
    def account(self, item: Batch | End) -> None: ...
    def metrics(self) -> dict[str, Any]: ...


class PlainInterleave:
    """One seeded interleave over the rank's partitions: the plain loader's blocks, in state format 3."""

    thread_name = "kafka-block-prefetch"

    def __init__(self, ctx: SourceContext):
        cfg = ctx.cfg
        self.ctx = ctx
        self.readers = [ctx.reader(w, ps) for w, ps in ctx.workers.items()]
        self.interleaver = Interleaver(ctx.workers, seed=cfg.seed, rank=cfg.rank)
        self.cursors = dict(ctx.start_cursors)  # position after the last delivered batch
        self.current: int | None = None
        self.skips: dict[int, Skips] = {}  # messages ahead of the cursors consumed under an earlier layout
        self.assembler = ctx.assembler(self.readers, self._state)

    def merge(self, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return merge_states(states)

    def _state(self, cursors: Mapping[int, Cursor], current: int | None) -> dict[str, Any]:
        return self.ctx.state(cursors, current, self.interleaver.get_state(), self.skips)

    def snapshot(self) -> dict[str, Any]:
        return self._state(self.cursors, self.current)

    def restore(self, state: Mapping[str, Any]) -> None:
        self.cursors = {int(p): Cursor(c["offset"], c["block"]) for p, c in state["partitions"].items()}
        self.current = state["current"]
        if state["interleave"] is not None:
            self.interleaver.set_state(state["interleave"])

    def plan_seek(self, state: Mapping[str, Any], own: bool, bounds: Any) -> SeekPlan:
        return SeekPlan(state, own, {None: self.ctx.checked_starts(state["partitions"], own, bounds)})

    def seek(self, plan: SeekPlan) -> None:
        cfg = self.ctx.cfg
        self.cursors, self.skips, skipped = plan.starts[None]
        if plan.own:
            self.interleaver.set_state(plan.state["interleave"])
            current = plan.state.get("current")
            # a message in progress that was deleted (skipped by allow_data_loss) is no longer in progress
            self.current = None if any(s.partition == current for s in skipped) else current
        else:
            self.interleaver = Interleaver(self.ctx.workers, seed=cfg.seed, rank=cfg.rank)
            self.current = None

    def start(self, budget: int) -> Iterator[Batch | End]:
        live = self.ctx.live(self.cursors)
        for r in self.readers:
            r.open({p: self.cursors[p].offset for p in r.partitions if p in live}, self.skips)
        return self.assembler.run(self.interleaver, dict(self.cursors), self.current, live, budget)

    def account(self, item: Batch | End) -> None:
        pass

    def metrics(self) -> dict[str, Any]:
        return {}
