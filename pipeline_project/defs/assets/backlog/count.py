"""The untrained backlog: the token_blocks batches the newest checkpoint has not wholly trained on.

Counted from the data's truth (each batch's newest materialization and its offset ranges against the checkpoint
head's `end_position`; see `sensors.checkpoint_trigger`) and carried over in a `BacklogStore` scope, so that a count
reads the materializations since the last one, not every batch ever, and what it carries itself (`BacklogState`)
is the scope's name and two numbers, whatever the backlog. The checkpoint trigger keeps one in its cursor;
training keeps one in the instance's key-value store (`load_training_state` / `save_training_state`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import dagster as dg

from pipeline_project.defs.assets.backlog.store import BacklogStore, Head, Row, SqliteBacklogStore
from pipeline_project.defs.partitions import plain_metadata, untrained_share

TOKEN_BLOCKS_KEY = dg.AssetKey("token_blocks")
CHECKPOINT_KEY = dg.AssetKey("deepseek_checkpoint")
TRAINING_STATE_KEY = "pipeline_project/training_backlog"

# The lineage's own view of its newest checkpoint, for the newest checkpoint materialization's metadata: a `Head`
# when it names another checkpoint (a rewind moved latest.json), else None (`defs.assets.lineage_head`).
HeadSource = Callable[[int, dict], Head | None]


@dataclass(frozen=True)
class Backlog:
    tokens: int  # untrained tokens, estimated as the module docstring says
    batches: int  # batches with untrained tokens
    checkpoint_id: int  # storage id of the newest checkpoint materialization (0: none)
    newest_id: int  # storage id of the newest token_blocks materialization taken (0: none)
    caught_up: bool = True  # False: a budget stopped the reading; `tokens` counts what was read so far
    head_key: str = ""  # the checkpoint head when it is not the newest materialization (a rewind)
    after: Callable[[int], float] = field(default=lambda _sid: 0.0, compare=False, repr=False)

    def tokens_after(self, storage_id: int) -> int:
        """Untrained tokens of the batches materialized after `storage_id`."""
        return round(self.after(storage_id))

    @property
    def run_key(self) -> str:
        """The same data and checkpoint give the same key, so the same backlog is requested once."""
        key = f"ckpt-{self.checkpoint_id}-tokens-upto-{self.newest_id}"
        return f"{key}-head-{self.head_key}" if self.head_key else key


@dataclass
class BacklogState:
    """What a counter carries between counts: the name of its `BacklogStore` scope, which holds the batches not
    wholly trained and what they were judged against. `after` and `checkpoint_id` repeat the scope's newest
    materialization taken and checkpoint, for the eye (the store's are the truth). A cursor of an earlier version,
    which carried every batch, gives a new scope: the next count reads every batch once."""

    scope: str = field(default_factory=BacklogStore.new_scope)
    after: int = 0
    checkpoint_id: int = 0

    def to_cursor(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_cursor(cls, cursor: str | None) -> BacklogState:
        try:
            data = json.loads(cursor) if cursor else {}
            scope = data.get("scope") if isinstance(data, dict) else None
            if not isinstance(scope, str) or not scope:
                return cls()
            return cls(scope, int(data.get("after", 0)), int(data.get("checkpoint_id", 0)))
        except (TypeError, ValueError, AttributeError):
            return cls()


def default_store(instance: dg.DagsterInstance) -> BacklogStore:
    """The stand-in store beside `instance` (its root directory), for a deployment without PostgreSQL."""
    return SqliteBacklogStore(getattr(instance, "root_directory", None))


def newest_head(instance: dg.DagsterInstance, lineage: HeadSource | None = None) -> Head:
    """The checkpoint the backlog is judged against: the newest checkpoint materialization's position and topic,
    unless `lineage` says its latest.json names another checkpoint (a rewind): then that checkpoint's."""
    records = instance.fetch_materializations(CHECKPOINT_KEY, limit=1).records
    if not records:
        return Head()
    meta = plain_metadata(records[0].asset_materialization)
    if lineage is not None:
        rewound = lineage(records[0].storage_id, meta)
        if rewound is not None:
            return rewound
    position = meta.get("end_position")
    return Head(records[0].storage_id, position if isinstance(position, dict) else None, meta.get("topic") or None)


def untrained_backlog(
    instance: dg.DagsterInstance,
    state: BacklogState | None = None,
    budget_s: float | None = None,
    *,
    store: BacklogStore | None = None,
    lineage: HeadSource | None = None,
) -> Backlog:
    """What of the topic the checkpoint head has not trained on; `state`'s scope in `store` carries it over
    (`state` is updated in place; without one, a new scope; without a store, the stand-in beside `instance`).

    With `budget_s`, reading the new materializations stops after the first page read past that many seconds
    (`caught_up` False; the next call goes on from there): a count that starts from nothing (a new lineage, a reset)
    at a million batches spreads its reading over ticks instead of passing Dagster's 60 s tick limit."""
    state = state if state is not None else BacklogState()
    store = store if store is not None else default_store(instance)
    head = newest_head(instance, lineage)
    header = store.header(state.scope)
    if header is None or not head.follows(header[1]):
        store.reset(state.scope, head)
        after = 0
    else:
        after, judged = header
        if head != judged:
            shares = {row.batch: _share(row, head) for row in store.candidates(state.scope, head)}
            store.judge(state.scope, shares, head)
    deadline = None if budget_s is None else time.monotonic() + budget_s
    caught_up = True
    for rows, page_after, more in _pages_after(instance, after, head):
        store.put(state.scope, rows, page_after)
        after = page_after
        if more and deadline is not None and time.monotonic() > deadline:
            caught_up = False
            break
    state.after, state.checkpoint_id = after, head.checkpoint_id
    tokens, batches = store.totals(state.scope, head)
    return Backlog(
        round(tokens),
        batches,
        checkpoint_id=head.checkpoint_id,
        newest_id=after,
        caught_up=caught_up,
        head_key=head.key,
        after=lambda sid: store.totals(state.scope, head, sid)[0],
    )


def _share(row: Row, head: Head) -> float:
    """A batch's untrained share under `head` (1.0 when the head says nothing of its topic)."""
    if not head.judges(row.topic):
        return 1.0  # the head trained another topic: it says nothing of this batch, which stays listed
    if row.ranges is not None and head.position is not None:
        return untrained_share(row.ranges, head.position)
    return 1.0 if row.storage_id > head.checkpoint_id else 0.0  # no position or no ranges: newer than the checkpoint


def _pages_after(
    instance: dg.DagsterInstance, after: int, head: Head, page_size: int = 500
) -> Iterator[tuple[list[Row], int, bool]]:
    """(rows judged under `head`, the newest storage id of the page, whether more pages follow) of the token_blocks
    materializations after storage id `after`, oldest first, a page at a time."""
    records_filter = dg.AssetRecordsFilter(asset_key=TOKEN_BLOCKS_KEY, after_storage_id=after or None)
    cursor = None
    while True:
        page = instance.fetch_materializations(records_filter, limit=page_size, cursor=cursor, ascending=True)
        newest: dict[str, Row] = {}  # a batch materialized twice in a page: its newer one
        for rec in page.records:
            batch = rec.asset_materialization.partition
            if batch:
                newest[batch] = _judged_row(batch, rec.storage_id, plain_metadata(rec.asset_materialization), head)
        if page.records:
            yield list(newest.values()), page.records[-1].storage_id, page.has_more
        if not page.has_more:
            return
        cursor = page.cursor


def _judged_row(batch: str, storage_id: int, meta: dict, head: Head) -> Row:
    ranges = meta.get("offset_ranges")
    ranges = ranges if isinstance(ranges, dict) else None
    row = Row(batch, storage_id, int(meta.get("tokens") or 0), 1.0, meta.get("topic") or None, ranges)
    return Row(**{**asdict(row), "share": _share(row, head)})


def load_training_state(instance: dg.DagsterInstance) -> BacklogState:
    return BacklogState.from_cursor(
        instance.run_storage.get_cursor_values({TRAINING_STATE_KEY}).get(TRAINING_STATE_KEY)
    )


def save_training_state(instance: dg.DagsterInstance, state: BacklogState) -> None:
    instance.run_storage.set_cursor_values({TRAINING_STATE_KEY: state.to_cursor()})
