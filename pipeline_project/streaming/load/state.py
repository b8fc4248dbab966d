"""The loader's data position and its deterministic interleave, as pure logic.

A rank reads partitions through one or more workers (readers). The delivered stream of
blocks is built message by message:

1. pick the next worker round-robin (skipping workers with no partition left);
2. that worker's seeded RNG picks one of its active partitions;
3. every remaining block of that partition's next message is delivered, in order.

Batch boundaries may cut a message; the rest of it is delivered first in the next batch.
So the block sequence depends on the topic contents, the seed and the assignment, never
on batch_size or on fetch timing (bounded mode).

The position is a `Cursor` per partition: the next message offset, and the index of the
next block inside that message (the partial-block cursor). With the round-robin pointer,
the RNG states and the partition whose message is in progress, it fully determines the
rest of the stream, and resuming is a seek to those offsets.

A rank that shares a partition with other ranks reads one stripe of it (`stripes.py`); its entry in
`partitions` then names the stripe, and any messages above the cursor that an earlier layout already
consumed (format version 3). `merge_states` turns every rank's state into one whole-partition position per
partition (their union), from which a loader of any world size starts (`resolve_state`, `start_positions`).

The state names the topic by name AND id (format version 2): offsets only mean something in one
incarnation of a topic, and a deleted and recreated topic restarts them at 0, so a saved cursor
would silently read nothing new (or the wrong data). A state whose topic id differs from the
topic's raises TopicRecreatedError naming both ids. Version-1 states (no id) still load, with a
warning that the id could not be checked.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline_project.streaming.errors import StateError, TopicRecreatedError
from pipeline_project.streaming.load.stripes import Share, Skips, make_entry, merge_partition, parse_entry, share_start

log = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 3
READABLE_STATE_VERSIONS = (1, 2, 3)  # 1: no topic id; 2: no stripes, no topic_partitions


@dataclass(frozen=True)
class Cursor:
    offset: int
    block: int = 0


def worker_seed(seed: int, rank: int, worker: int) -> int:
    """Independent, reproducible RNG stream per (rank, worker)."""
    return (seed * 1_000_003 + rank) * 1_000_003 + worker


class Interleaver:
    """Round-robin over workers, seeded random choice among a worker's active partitions."""

    def __init__(self, workers: Mapping[int, Sequence[int]], *, seed: int, rank: int):
        self.workers = {w: tuple(sorted(ps)) for w, ps in sorted(workers.items())}
        self.order = list(self.workers)
        self.rngs = {w: random.Random(worker_seed(seed, rank, w)) for w in self.order}
        self.rr = 0

    def next_partition(self, active: set[int] | frozenset[int]) -> int | None:
        """The partition whose next message comes next, or None when no partition is active."""
        n = len(self.order)
        for step in range(n):
            w = self.order[(self.rr + step) % n]
            choices = [p for p in self.workers[w] if p in active]
            if not choices:
                continue
            self.rr = (self.rr + step + 1) % n
            if len(choices) == 1:
                return choices[0]
            return choices[self.rngs[w].randrange(len(choices))]
        return None

    def get_state(self) -> dict[str, Any]:
        return {
            "rr": self.rr,
            "rng": {str(w): _rng_state_to_json(r.getstate()) for w, r in self.rngs.items()},
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        rngs = state["rng"]
        if sorted(rngs) != sorted(str(w) for w in self.order):
            raise StateError(f"interleave state has workers {sorted(rngs)}, this loader has {self.order}")
        self.rr = int(state["rr"]) % len(self.order)
        for w, r in self.rngs.items():
            r.setstate(_rng_state_from_json(rngs[str(w)]))


def _rng_state_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_state_from_json(state: Sequence) -> tuple:
    version, internal, gauss = state
    return (int(version), tuple(int(x) for x in internal), gauss)


def make_state(
    *,
    topic: str,
    topic_id: str | None,
    rank: int,
    world_size: int,
    num_workers: int,
    seed: int,
    cursors: Mapping[int, Cursor],
    current: int | None,
    interleave: Mapping[str, Any],
    shares: Mapping[int, Share] | None = None,
    skips: Mapping[int, Skips] | None = None,
    topic_partitions: int | None = None,
) -> dict[str, Any]:
    """The JSON-serializable state saved inside a checkpoint (partition keys are strings)."""
    return {
        "format_version": STATE_FORMAT_VERSION,
        "topic": topic,
        "topic_id": topic_id,
        "topic_partitions": topic_partitions,
        "rank": rank,
        "world_size": world_size,
        "num_workers": num_workers,
        "seed": seed,
        "partitions": position_entries(cursors, shares, skips),
        "current": current,
        "interleave": dict(interleave),
    }


def position_entries(
    cursors: Mapping[int, Cursor], shares: Mapping[int, Share] | None = None, skips: Mapping[int, Skips] | None = None
) -> dict[str, dict[str, Any]]:
    """`partitions` of a state: per partition its cursor, stripe and the skips still ahead of the cursor."""
    shares, skips = shares or {}, skips or {}
    return {
        str(p): make_entry(shares.get(p, Share(p)), c.offset, c.block, skips.get(p, Skips()))
        for p, c in sorted(cursors.items())
    }


def parse_cursors(state: Mapping[str, Any], *, topic: str, topic_id: str | None = None) -> dict[int, Cursor]:
    """Validate the version, topic and topic id of a state and return its per-partition cursors.

    `topic_id` None skips the id check (pure logic without a cluster at hand).
    """
    version = state.get("format_version")
    if version not in READABLE_STATE_VERSIONS:
        raise StateError(f"loader state format_version {version!r} is not one of {READABLE_STATE_VERSIONS}")
    if state.get("topic") != topic:
        raise StateError(f"loader state is for topic {state.get('topic')!r}, this loader reads {topic!r}")
    saved_id = state.get("topic_id")
    if topic_id is not None:
        if saved_id is None:
            log.warning(
                "loader state (format_version %s) of topic %r carries no topic id: cannot check that the topic was "
                "not deleted and recreated since it was saved; the cursors are checked against the offsets only",
                version,
                topic,
            )
        elif saved_id != topic_id:
            raise TopicRecreatedError(
                f"loader state is for topic {topic!r} with id {saved_id}, but {topic!r} now has id {topic_id}: the "
                "topic was deleted and recreated, so the saved offsets point into data that no longer exists. "
                "Start from a fresh data position (drop the loader state) if training on the new topic is intended",
                saved_id=saved_id,
                current_id=topic_id,
            )
    cursors = {}
    for p, c in state["partitions"].items():
        _, offset, block, _ = parse_entry(p, c)
        cursors[int(p)] = Cursor(offset, block)
    return cursors


def _stripes(state: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    return {int(p): tuple(int(x) for x in c.get("stripe", (0, 1))) for p, c in state["partitions"].items()}


def same_layout(
    state: Mapping[str, Any],
    *,
    rank: int,
    world_size: int,
    num_workers: int,
    seed: int,
    shares: Mapping[int, Share] | None = None,
) -> bool:
    """True when the state was taken by a loader with this rank, layout and seed (RNG state applies).

    With `shares` (this loader's partitions and stripes), the state must hold exactly those: a topic that grew
    since, with the same world size, is another layout."""
    same = (state.get("rank"), state.get("world_size"), state.get("num_workers"), state.get("seed")) == (
        rank,
        world_size,
        num_workers,
        seed,
    )
    if not same or shares is None:
        return same
    return _stripes(state) == {p: (s.stripe, s.stripes) for p, s in shares.items()}


def resolve_state(
    state: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    fits: Callable[[Mapping[str, Any]], bool],
    merge: Callable[[list[Mapping[str, Any]]], Mapping[str, Any]],
) -> tuple[Mapping[str, Any], bool]:
    """(the state a rank resumes from, whether it is its own of the same layout): given this rank's state, or every
    rank's states, the one that `fits` this loader's layout; otherwise the `merge`d union of all of them."""
    states = [state] if isinstance(state, Mapping) else list(state)
    mine = [s for s in states if fits(s)]
    if len(mine) == 1 and (isinstance(state, Mapping) or len(states) == mine[0].get("world_size")):
        return mine[0], True
    return merge(states), False


def merge_positions(
    partition_states: Iterable[Mapping[str, Any]], topic_partitions: int | None = None
) -> dict[str, Any]:
    """Union of the `partitions` entries of every rank's state: one whole-partition entry per partition.

    With `topic_partitions` (the topic's partition count when they were saved), every one of those partitions
    must be named; partitions added later are not, and start at their log start."""
    entries: dict[str, list[Mapping[str, Any]]] = {}
    for partitions in partition_states:
        for p, c in partitions.items():
            entries.setdefault(str(p), []).append(c)
    if topic_partitions is not None:
        missing = sorted(set(range(topic_partitions)) - {int(p) for p in entries})
        if missing:
            raise StateError(f"no state names partitions {missing} of {topic_partitions}: pass every rank's state")
    return {p: merge_partition(p, es) for p, es in sorted(entries.items(), key=lambda kv: int(kv[0]))}


def merge_states(states: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Union of the positions of every rank's state, for resuming with another layout (`stripes.py`).

    The merged state carries no interleave state: a loader with a different world size or
    worker count restarts its interleave from the seed at the saved positions (no block lost
    or repeated, order differs).
    """
    states = list(states)
    if not states:
        raise StateError("no states to merge")
    topic = states[0]["topic"]
    ids = {s.get("topic_id") for s in states}
    if len(ids) > 1:
        raise StateError(f"rank states of topic {topic!r} carry different topic ids {sorted(map(str, ids))}")
    counts = {s.get("topic_partitions") for s in states} - {None}
    if len(counts) > 1:
        raise StateError(f"rank states of topic {topic!r} were saved at different partition counts {sorted(counts)}")
    for s in states:
        parse_cursors(s, topic=topic)
    count = counts.pop() if counts else None
    return {
        "format_version": STATE_FORMAT_VERSION,
        "topic": topic,
        "topic_id": ids.pop(),  # None when merged from version-1 states
        "topic_partitions": count,
        "rank": None,
        "world_size": None,
        "num_workers": None,
        "seed": None,
        "partitions": merge_positions((s["partitions"] for s in states), count),
        "current": None,
        "interleave": None,
    }


def start_positions(
    entries: Mapping[str, Mapping[str, Any]], shares: Mapping[int, Share], *, own: bool
) -> dict[int, tuple[Cursor, Skips]]:
    """Where each of `shares` starts: from this rank's own entries (`own`), or from merged whole-partition entries
    (`merge_states`); partitions the entries do not name are left out (they start at their log start)."""
    out = {}
    for p, share in shares.items():
        entry = entries.get(str(p))
        if entry is None:
            continue
        if own:
            _, offset, block, skips = parse_entry(p, entry)
        else:
            offset, block, skips = share_start(entry, share)
        out[p] = (Cursor(offset, block), skips)
    return out


def gather_state(loader: Any, group: Any = None) -> list[dict[str, Any]]:
    """Every rank's `loader.state_dict()`, on every rank (collective: all ranks must call it).

    Save the list in the checkpoint; `load_state_dict(list)` picks this rank's entry, or
    merges them when the world size changed.
    """
    import torch.distributed as dist

    states: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(states, loader.state_dict(), group=group)
    return states
