"""What the raw S3 sensor lists on each tick, with a cursor that keeps a tick's cost bounded.

Two listings, both in key order, both bounded per tick:

- **append** (every tick): `ListObjectsV2(StartAfter=cursor.start_after)`, read page by page only as far as
  the tick's batches need. Every key up to `start_after` has been taken, so for layouts where new keys sort after
  old ones (date or sequence prefixes: `raw/2026/12/03/...`, `raw/000123.jsonl`) a tick reads the new
  objects and nothing else, however many were ingested before.
- **scan** (the full listing; it starts on the first tick, then every `full_scan_every` ticks after the last
  one finished): walks the keys up to `start_after`, the part the append listing never reads again, and takes
  those modified since the previous scan began (keys that landed out of order). It reads at most
  `scan_pages` pages or `scan_seconds` per tick and keeps its position in the cursor, so a prefix of any
  size is scanned over several ticks and no tick outgrows the sensor's timeout. When it reaches
  `start_after`, `since` becomes the server's time (the `Date` header) of the scan's first page: an object
  the scan passed before it landed was modified after that, so the next scan finds it. An object can be
  stamped before it is listable (a multipart upload carries the time it was initiated), so the scan looks
  `lookback_s` further back (the sensor's default: 15 min).

A tick takes up to `max_batches` batches (`packing.Packer` cuts them in the order the listings take objects:
scan, append, sources), and opens no new batch `tick_seconds` into the tick; every listing stops just before the
first object that does not fit, so the cursor after the tick covers exactly the objects of its batches.

Both exclude what either took: `recent` holds the versions taken (key, stamp and ETag) that a scan could still
return (modified since `since` minus `lookback_s`), so no version lands in two batches, and a key overwritten
after it was taken (another ETag) is new input again: a scan takes it once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime

from pipeline_project.ingest.listing.cursor import (
    Limits,
    TickCursor,
    is_taken,
    listed_object,
    remember,
    server_time,
    taken_versions,
)
from pipeline_project.ingest.listing.packing import Packer
from pipeline_project.ingest.listing.sources import source_tick
from pipeline_project.ingest.manifest import RawObject


def _prune(cursor: TickCursor, limits: Limits) -> TickCursor:
    """Forget the taken keys no scan can return again: every one is at or before `start_after` (the append
    listing passed it when it was taken, or it was taken by a scan), so what decides is the scans' `since`."""
    low = cursor.list_since(limits.lookback_s)
    if low is None:
        return cursor
    keep = tuple(r for r in cursor.recent if datetime.fromisoformat(r[1]) >= low)
    return replace(cursor, recent=keep, complete_from=low.isoformat())


def _page(client, bucket: str, prefix: str, after: str | None, limits: Limits) -> dict:
    kwargs = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": limits.page_keys}
    if after:
        kwargs["StartAfter"] = after
    return client.list_objects_v2(**kwargs)


def scan_step(
    client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, packer: Packer, clock=time.monotonic
):
    """Go on with the scan (or start it): objects at or before `start_after` modified since `since`, in key order,
    into `packer`; the cursor after it."""
    t0 = clock()
    low = cursor.list_since(limits.lookback_s)
    skip = taken_versions(cursor.recent)
    started = cursor.scan_started
    after = cursor.scan_after
    before = len(packer)
    pages, done, full = 0, False, False
    while True:
        page = _page(client, bucket, prefix, after, limits)
        pages += 1
        if started is None:
            started = server_time(page).isoformat()
        for item in page.get("Contents", []):
            key = item["Key"]
            if cursor.start_after is None or key > cursor.start_after:
                done = True  # the append listing's part
                break
            obj = listed_object(item)
            wanted = (
                obj is not None
                and not is_taken(obj, skip)
                and (low is None or datetime.fromisoformat(obj.last_modified) >= low)
            )
            if wanted and not packer.add(obj):
                full = True
                break
            after = key
        if not page.get("IsTruncated"):
            done = not full
        if done or full or pages >= limits.scan_pages or clock() - t0 >= limits.scan_seconds:
            break
    recent = remember(cursor.recent, packer.taken[before:])
    if done:
        out = replace(cursor, since=started, recent=recent, ticks=0, scan_after=None, scan_started=None)
    else:
        out = replace(cursor, recent=recent, scan_after=after, scan_started=started)
    return _prune(out, limits)


def append_tick(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, packer: Packer) -> TickCursor:
    """Add new objects in key order after `start_after` to `packer`, reading only the pages its batches need."""
    recent = taken_versions(cursor.recent)
    before = len(packer)
    start_after = cursor.start_after
    while True:
        page = _page(client, bucket, prefix, start_after, limits)
        full = False
        for item in page.get("Contents", []):
            obj = listed_object(item)
            if obj is None or is_taken(obj, recent):
                start_after = item["Key"]
                continue
            if not packer.add(obj):
                full = True
                break
            start_after = obj.key
        if full or not page.get("IsTruncated"):
            break
    recent_out = remember(cursor.recent, packer.taken[before:])
    return _prune(replace(cursor, start_after=start_after, recent=recent_out), limits)


@dataclass(frozen=True)
class TickPlan:
    """What one tick takes: its batches in order (none when nothing is new), and the cursor past all of them."""

    batches: tuple[tuple[RawObject, ...], ...]
    cursor: TickCursor
    stopped_by: str | None = None  # "batches" (max_batches) or "time" (tick_seconds): more may be waiting

    @property
    def objects(self) -> list[RawObject]:
        return [o for b in self.batches for o in b]


def plan_batches(
    client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, clock=time.monotonic
) -> TickPlan:
    """One sensor tick: up to `limits.max_batches` batches of new objects, and the cursor after all of them.

    The scan (when due or running), then the append listing, then the source prefixes, each only while the
    batches have room; the scan's pages and the sources' time are bounded per tick as before, and no new batch
    opens `limits.tick_seconds` after the tick began."""
    t0 = clock()
    packer = Packer(limits, None if limits.tick_seconds is None else t0 + limits.tick_seconds, clock)
    due = cursor.since is None or (limits.full_scan_every > 0 and cursor.ticks + 1 >= limits.full_scan_every)
    kind = "append"
    if cursor.scanning or due:
        cursor = scan_step(client, bucket, prefix, cursor, limits, packer, clock)
        kind = "scan+append"
    else:
        cursor = replace(cursor, ticks=cursor.ticks + 1)
    if not packer.full:
        cursor = append_tick(client, bucket, prefix, cursor, limits, packer)
    if not packer.full:
        cursor = source_tick(client, bucket, prefix, cursor, limits, packer, clock)
    batches = tuple(tuple(b) for b in packer.batches)
    return TickPlan(batches, replace(cursor, kind=kind), packer.stopped_by)


def plan_tick(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, clock=time.monotonic):
    """One batch's worth (`limits.max_batches` = 1, the default): the objects it takes and the cursor after it."""
    plan = plan_batches(client, bucket, prefix, cursor, limits, clock)
    return plan.objects, plan.cursor
