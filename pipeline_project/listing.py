"""What the raw S3 sensor lists on each tick, with a cursor that keeps a tick's cost O(new objects).

Two listings:

- **append** (most ticks): `ListObjectsV2(StartAfter=cursor.start_after)`, read page by page only as far as
  one batch needs. Every key up to `start_after` has been taken, so for layouts where new keys sort after
  old ones (date or sequence prefixes: `raw/2026/12/03/...`, `raw/000123.jsonl`) a tick reads the new
  objects and nothing else, however many were ingested before.
- **full** (the first tick, then every `full_scan_every` ticks): the whole prefix, filtered by LastModified
  (the `since` cursor and the keys at its edge, as S3 stamps whole seconds). It finds objects whose keys
  land before `start_after` (keys that are not append-only). Its cost grows with the prefix, so it runs
  rarely; for layouts that are not append-only at all, set `full_scan_every=1` (every tick is then a full
  listing, as before) or accept a delay of up to `full_scan_every` ticks for out-of-order keys.

Both exclude what the other took: `recent` holds the keys taken since they could still be listed again
(key after `start_after`, or modified after `since` minus the margin), so no object lands in two batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pipeline_project.ingest import CURSOR_MARGIN_S, RawObject

PAGE_KEYS = 1000


@dataclass(frozen=True)
class TickCursor:
    since: str | None = None  # newest LastModified the full listing has passed
    edge_keys: tuple[str, ...] = ()  # keys at the `since` edge already taken
    start_after: str | None = None  # every key <= this is taken (or was excluded)
    recent: tuple[tuple[str, str], ...] = ()  # (key, last_modified) taken that a listing could return again
    ticks: int = 0  # ticks since the last full listing
    kind: str = field(default="", compare=False)  # what the last tick did: "full" or "append"

    def to_json(self) -> str:
        return json.dumps(
            {
                "since": self.since,
                "edge_keys": list(self.edge_keys),
                "start_after": self.start_after,
                "recent": [list(r) for r in self.recent],
                "ticks": self.ticks,
            }
        )

    @classmethod
    def from_json(cls, raw: str | None) -> TickCursor:
        if not raw:
            return cls()
        d = json.loads(raw)
        return cls(
            since=d.get("since"),
            edge_keys=tuple(d.get("edge_keys", ())),
            start_after=d.get("start_after"),
            recent=tuple((k, lm) for k, lm in d.get("recent", ())),
            ticks=int(d.get("ticks", 0)),
        )

    def list_since(self) -> datetime | None:
        return None if self.since is None else datetime.fromisoformat(self.since) - timedelta(seconds=CURSOR_MARGIN_S)


@dataclass(frozen=True)
class Limits:
    max_objects: int
    max_bytes: int
    full_scan_every: int  # 0: only the first tick lists everything


def _fits(taken: list[RawObject], obj: RawObject, limits: Limits) -> bool:
    if not taken:
        return True  # one object larger than max_bytes still gets a batch of its own
    return len(taken) < limits.max_objects and sum(o.size for o in taken) + obj.size <= limits.max_bytes


def _listed(obj: dict) -> RawObject | None:
    return None if obj["Key"].endswith("/") else RawObject.from_listing(obj)


def _prune(cursor: TickCursor) -> TickCursor:
    """Forget recent keys that neither listing can return again."""
    low = cursor.list_since()
    keep = tuple(
        (k, lm)
        for k, lm in cursor.recent
        if (cursor.start_after is None or k > cursor.start_after) or low is None or datetime.fromisoformat(lm) >= low
    )
    return replace(cursor, recent=keep)


def full_tick(listing: list[dict], cursor: TickCursor, limits: Limits) -> tuple[list[RawObject], TickCursor]:
    """Take the oldest new objects of a whole-prefix listing (filtered by `since`)."""
    objects = [o for o in (_listed(x) for x in listing) if o is not None]
    skip = set(cursor.edge_keys) | {k for k, _ in cursor.recent}
    fresh = sorted((o for o in objects if o.key not in skip), key=lambda o: (o.last_modified, o.key))
    taken: list[RawObject] = []
    for o in fresh:
        if not _fits(taken, o, limits):
            break
        taken.append(o)
    since = cursor.since
    if taken:
        since = max([taken[-1].last_modified] + ([cursor.since] if cursor.since else []))
    if len(taken) == len(fresh) and objects:  # nothing left behind: the whole listing is done
        since = max([o.last_modified for o in objects] + ([since] if since else []))
    edge_keys = cursor.edge_keys
    if since is not None:
        edge_from = datetime.fromisoformat(since).timestamp() - CURSOR_MARGIN_S
        known = [o for o in objects if o.key in skip] + taken
        edge_keys = tuple(
            sorted({o.key for o in known if datetime.fromisoformat(o.last_modified).timestamp() >= edge_from})
        )
    start_after = cursor.start_after
    if cursor.since is None:  # the first listing: everything up to the first object not taken is done
        done = skip | {o.key for o in taken}
        for o in sorted(objects, key=lambda o: o.key):
            if o.key not in done:
                break
            start_after = o.key
    recent = cursor.recent + tuple((o.key, o.last_modified) for o in taken)
    out = TickCursor(since=since, edge_keys=edge_keys, start_after=start_after, recent=recent, ticks=0, kind="full")
    return taken, _prune(out)


def append_tick(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits):
    """Take new objects in key order after `start_after`, reading only as many pages as one batch needs."""
    recent = {k for k, _ in cursor.recent}
    taken: list[RawObject] = []
    start_after = cursor.start_after
    kwargs = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS}
    if start_after:
        kwargs["StartAfter"] = start_after
    full = False
    while not full:
        page = client.list_objects_v2(**kwargs)
        for item in page.get("Contents", []):
            obj = _listed(item)
            if obj is None or obj.key in recent:
                start_after = item["Key"]
                continue
            if not _fits(taken, obj, limits):
                full = True
                break
            taken.append(obj)
            start_after = obj.key
        if full or not page.get("IsTruncated"):
            break
        kwargs = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS,
                  "ContinuationToken": page["NextContinuationToken"]}  # fmt: skip
    recent_out = cursor.recent + tuple((o.key, o.last_modified) for o in taken)
    out = replace(cursor, start_after=start_after, recent=recent_out, ticks=cursor.ticks + 1, kind="append")
    return taken, _prune(out)


def plan_tick(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, list_all):
    """One sensor tick: the objects of the next batch and the cursor after it. `list_all(since)` lists the prefix."""
    due = limits.full_scan_every > 0 and cursor.ticks + 1 >= limits.full_scan_every
    if cursor.since is None or due:
        return full_tick(list_all(cursor.list_since()), cursor, limits)
    return append_tick(client, bucket, prefix, cursor, limits)
