"""The untrained backlog: the token_blocks batches the newest checkpoint has not wholly trained on.

Counted from the data's truth (each batch's newest materialization and its offset ranges against the newest
checkpoint's `end_position`; see `sensors.checkpoint_trigger`), and carried over in a `BacklogState`, so that a
count reads the materializations since the last one, not every batch ever. The checkpoint trigger keeps one in its
cursor; training keeps one in the instance's key-value store (`load_training_state` / `save_training_state`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import dagster as dg

from pipeline_project.defs.partitions import plain_metadata, untrained_share

TOKEN_BLOCKS_KEY = dg.AssetKey("token_blocks")
CHECKPOINT_KEY = dg.AssetKey("deepseek_checkpoint")
TRAINING_STATE_KEY = "pipeline_project/training_backlog"


@dataclass(frozen=True)
class Backlog:
    tokens: int  # untrained tokens, estimated as the module docstring says
    batches: int  # batches with untrained tokens
    checkpoint_id: int  # storage id of the newest checkpoint materialization (0: none)
    newest_id: int  # storage id of the newest token_blocks materialization (0: none)
    parts: tuple[tuple[int, float], ...] = ()  # (storage id, untrained tokens) of each batch counted
    caught_up: bool = True  # False: a budget stopped the reading; `tokens` counts what was read so far

    def tokens_after(self, storage_id: int) -> int:
        """Untrained tokens of the batches materialized after `storage_id`."""
        return round(sum(tokens for sid, tokens in self.parts if sid > storage_id))

    @property
    def run_key(self) -> str:
        """The same data and checkpoint give the same key, so the same backlog is requested once."""
        return f"ckpt-{self.checkpoint_id}-tokens-upto-{self.newest_id}"


@dataclass
class BacklogState:
    """What the trigger keeps between ticks (its cursor), so a tick reads the materializations since the last one,
    not every batch ever: the newest token_blocks materialization taken (`after`, a storage id), the checkpoint
    it pruned with, and the batches not wholly trained at that checkpoint (batch -> [storage id, tokens, offset
    ranges or None, topic or None]). A batch wholly behind a checkpoint's position stays trained while positions only move
    forward; when the newest checkpoint's position is behind the one pruned with (another lineage, a reset), the
    state is rebuilt from every materialization."""

    after: int = 0
    checkpoint_id: int = 0
    position: dict | None = None
    pending: dict[str, list] = field(default_factory=dict)

    def to_cursor(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_cursor(cls, cursor: str | None) -> BacklogState:
        try:
            state = cls(**json.loads(cursor)) if cursor else cls()
        except (TypeError, ValueError):  # a cursor of an earlier version: rebuild
            return cls()
        return state if all(len(entry) == 4 for entry in state.pending.values()) else cls()

    def follows(self, checkpoint_id: int, position: dict | None) -> bool:
        """May this state's pruning stand under the newest checkpoint (`checkpoint_id`, `position`)?"""
        if checkpoint_id < self.checkpoint_id:
            return False
        if self.position is None:
            return True
        if position is None:
            return False
        return all(_offset(position, p) >= _offset(self.position, p) for p in self.position)


def _offset(position: dict, partition: str) -> int:
    return int((position.get(str(partition)) or {}).get("offset", 0))


def untrained_backlog(
    instance: dg.DagsterInstance, state: BacklogState | None = None, budget_s: float | None = None
) -> Backlog:
    """What of the topic the newest checkpoint has not trained on; `state` (updated in place) carries it over.

    With `budget_s`, reading the new materializations stops after the first page read past that many seconds
    (`caught_up` False; the next call goes on from there): a tick that starts from nothing (a new lineage, a reset)
    at a million batches spreads its reading over ticks instead of passing Dagster's 60 s tick limit."""
    state = state if state is not None else BacklogState()
    last_ckpt = instance.fetch_materializations(CHECKPOINT_KEY, limit=1).records
    checkpoint_id = last_ckpt[0].storage_id if last_ckpt else 0
    ckpt_meta = plain_metadata(last_ckpt[0].asset_materialization) if last_ckpt else {}
    position = ckpt_meta.get("end_position")
    position = position if isinstance(position, dict) else None
    ckpt_topic = ckpt_meta.get("topic")  # a position is a position in its own topic (None: checkpoints before it)
    if not state.follows(checkpoint_id, position):
        state.after, state.pending = 0, {}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    caught_up = True
    for storage_id, batch, meta, page_end in _materializations_after(instance, state.after):
        ranges = meta.get("offset_ranges")
        ranges = ranges if isinstance(ranges, dict) else None
        state.pending[batch] = [storage_id, int(meta.get("tokens") or 0), ranges, meta.get("topic")]
        state.after = storage_id
        if page_end and deadline is not None and time.monotonic() > deadline:
            caught_up = False
            break
    state.checkpoint_id, state.position = checkpoint_id, position
    parts: list[tuple[int, float]] = []
    for batch, (storage_id, batch_tokens, ranges, topic) in list(state.pending.items()):
        if ckpt_topic and topic and topic != ckpt_topic:
            continue  # the newest checkpoint trained another topic: it says nothing of this batch, which stays listed
        if ranges is not None and position is not None:
            share = untrained_share(ranges, position)
        else:  # no position (no checkpoint yet) or no ranges to compare: untrained if newer than the checkpoint
            share = 1.0 if storage_id > checkpoint_id else 0.0
        if share == 0.0:
            del state.pending[batch]  # trained, and stays so while positions move forward
        elif batch_tokens > 0:
            parts.append((storage_id, share * batch_tokens))
    tokens = round(sum(t for _sid, t in parts))
    return Backlog(
        tokens, len(parts), checkpoint_id=checkpoint_id, newest_id=state.after, parts=tuple(parts), caught_up=caught_up
    )


def _materializations_after(
    instance: dg.DagsterInstance, after: int, page_size: int = 500
) -> Iterator[tuple[int, str, dict, bool]]:
    """(storage id, batch, metadata, last of a page that more pages follow) of the token_blocks materializations after
    storage id `after`, oldest first."""
    records_filter = dg.AssetRecordsFilter(asset_key=TOKEN_BLOCKS_KEY, after_storage_id=after or None)
    cursor = None
    while True:
        page = instance.fetch_materializations(records_filter, limit=page_size, cursor=cursor, ascending=True)
        named = [rec for rec in page.records if rec.asset_materialization.partition]
        for i, rec in enumerate(named):
            meta = plain_metadata(rec.asset_materialization)
            yield rec.storage_id, rec.asset_materialization.partition, meta, page.has_more and i == len(named) - 1
        if not page.has_more:
            return
        cursor = page.cursor


def load_training_state(instance: dg.DagsterInstance) -> BacklogState:
    return BacklogState.from_cursor(
        instance.run_storage.get_cursor_values({TRAINING_STATE_KEY}).get(TRAINING_STATE_KEY)
    )


def save_training_state(instance: dg.DagsterInstance, state: BacklogState) -> None:
    instance.run_storage.set_cursor_values({TRAINING_STATE_KEY: state.to_cursor()})
