"""What the raw S3 sensor lists on each tick, with a cursor that keeps a tick's cost bounded.

Two listings, both in key order, both bounded per tick:

- **append** (every tick): `ListObjectsV2(StartAfter=cursor.start_after)`, read page by page only as far as
  one batch needs. Every key up to `start_after` has been taken, so for layouts where new keys sort after
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

Both exclude what either took: `recent` holds the versions taken (key, stamp and ETag) that a scan could still
return (modified since `since` minus `lookback_s`), so no version lands in two batches, and a key overwritten
after it was taken (another ETag) is new input again: a scan takes it once.
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

from pipeline_project.ingest.manifest import RawObject

# S3 stamps LastModified in whole seconds, and an object can land in the same second as the edge a scan
# has passed: every comparison with `since` starts at least this much before it.
CURSOR_MARGIN_S = 2.0
# Without a Date header (every S3 server we know sends one) the scan's start is taken from this
# machine's clock, this much earlier, to cover the skew between the two clocks.
CLOCK_SKEW_S = 300.0


RECENT_INLINE = 100  # more recent keys than this are stored zlib-compressed in the cursor


def _unpack_recent(d: dict) -> list:
    if "recent_z" in d:
        return json.loads(zlib.decompress(base64.b64decode(d["recent_z"])))
    return d.get("recent", [])


def _entry(r) -> tuple[str, str, str]:
    """(key, last_modified, etag); cursors before issue 27 stored no ETag (""): their entries match by stamp."""
    return (r[0], r[1], r[2] if len(r) > 2 else "")


def _version(key: str, last_modified: str, etag: str) -> tuple[str, str]:
    return (key, etag) if etag else (key, f"@{last_modified}")


def taken_versions(recent) -> set[tuple[str, str]]:
    """What `is_taken` looks up: each taken version by ETag, and by stamp for entries that have none."""
    return {_version(*r) for r in recent}


def is_taken(obj: RawObject, versions: set[tuple[str, str]]) -> bool:
    return _version(obj.key, obj.last_modified, obj.etag) in versions or (obj.key, f"@{obj.last_modified}") in versions


def remember(recent: tuple, objects) -> tuple:
    return recent + tuple((o.key, o.last_modified, o.etag) for o in objects)


@dataclass(frozen=True)
class TickCursor:
    since: str | None = None  # every object modified before this (minus the margin) is taken
    start_after: str | None = None  # every key <= this is taken (or was excluded)
    recent: tuple[tuple[str, str, str], ...] = ()  # (key, last_modified, etag) taken that a scan could return
    ticks: int = 0  # ticks since the last scan finished
    scan_after: str | None = None  # the running scan has examined every key <= this
    scan_started: str | None = None  # server time of the running scan's first page; None: no scan is running
    complete_from: str | None = None  # `recent` holds every taken key stamped at or after this (None: all)
    sources: tuple[tuple[str, str | None, int], ...] = ()  # (source prefix, its position, last active): listing_sources
    known: str | None = None  # every source prefix seen, as a packed Bloom filter (listing_sources.KnownPrefixes)
    discover_after: str | None = None  # where the walk of the source prefixes goes on
    kind: str = field(default="", compare=False)  # what the last tick read: "scan+append" or "append"

    @property
    def scanning(self) -> bool:
        return self.scan_started is not None

    def to_json(self) -> str:
        recent = [list(r) for r in self.recent]
        if len(recent) > RECENT_INLINE:  # Dagster stores the cursor with every tick; sorted keys compress well
            packed = {"recent_z": base64.b64encode(zlib.compress(json.dumps(sorted(recent)).encode())).decode()}
        else:
            packed = {"recent": recent}
        if self.sources:
            sources = json.dumps([list(s) for s in self.sources]).encode()
            packed["sources_z"] = base64.b64encode(zlib.compress(sources)).decode()
        if self.known:
            packed.update(known=self.known, discover_after=self.discover_after)
        return json.dumps(
            {
                "since": self.since,
                "start_after": self.start_after,
                **packed,
                "ticks": self.ticks,
                "scan_after": self.scan_after,
                "scan_started": self.scan_started,
                "complete_from": self.complete_from,
            }
        )

    @classmethod
    def from_json(cls, raw: str | None) -> TickCursor:
        """Reads this cursor and the one before it, which had `edge_keys` (all of them also in `recent`) and kept
        in `recent` only the keys stamped within the 2 s margin of `since`."""
        if not raw:
            return cls()
        d = json.loads(raw)
        complete_from = d.get("complete_from")
        if "complete_from" not in d and d.get("since"):
            complete_from = (datetime.fromisoformat(d["since"]) - timedelta(seconds=CURSOR_MARGIN_S)).isoformat()
        return cls(
            since=d.get("since"),
            start_after=d.get("start_after"),
            recent=tuple(_entry(r) for r in _unpack_recent(d)),
            ticks=int(d.get("ticks", 0)),
            scan_after=d.get("scan_after"),
            scan_started=d.get("scan_started"),
            complete_from=complete_from,
            sources=tuple(tuple(s) for s in json.loads(zlib.decompress(base64.b64decode(d["sources_z"]))))
            if "sources_z" in d
            else (),
            known=d.get("known"),
            discover_after=d.get("discover_after"),
        )

    def list_since(self, lookback_s: float = CURSOR_MARGIN_S) -> datetime | None:
        """The oldest stamp a scan takes: `lookback_s` before `since`, but never before the stamps `recent` is
        complete for (a cursor pruned with a shorter lookback would otherwise let a scan take keys again)."""
        if self.since is None:
            return None
        low = datetime.fromisoformat(self.since) - timedelta(seconds=lookback_s)
        return low if self.complete_from is None else max(low, datetime.fromisoformat(self.complete_from))


@dataclass(frozen=True)
class Limits:
    max_objects: int
    max_bytes: int
    full_scan_every: int  # 0: only the first tick scans
    scan_pages: int = 10  # at most this many pages of the scan per tick
    scan_seconds: float = 20.0  # and no new page after this long (a tick reads at least one)
    page_keys: int = 1000
    lookback_s: float = CURSOR_MARGIN_S  # a scan takes objects stamped this long before the previous scan began
    source_depth: int = 0  # > 0: the prefixes this many levels down get cursors of their own (listing_sources)
    max_sources: int = 200  # at most this many of them keep a position in the cursor
    discover_pages: int = 5  # pages of the walk that finds new source prefixes, per tick
    source_seconds: float = 15.0  # reading the sources starts no new one after this long


def fits_batch(taken: list[RawObject], obj: RawObject, limits: Limits) -> bool:
    """Whether `obj` joins the batch `taken` within the limits."""
    if not taken:
        return True  # one object larger than max_bytes still gets a batch of its own
    return len(taken) < limits.max_objects and sum(o.size for o in taken) + obj.size <= limits.max_bytes


def listed_object(obj: dict) -> RawObject | None:
    """A listing entry as a `RawObject`; None for a folder marker."""
    return None if obj["Key"].endswith("/") else RawObject.from_listing(obj)


def server_time(page: dict) -> datetime:
    date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        return parsedate_to_datetime(date)
    return datetime.now(timezone.utc) - timedelta(seconds=CLOCK_SKEW_S)


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


def scan_step(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, clock=time.monotonic):
    """Go on with the scan (or start it): objects at or before `start_after` modified since `since`, in key order."""
    t0 = clock()
    low = cursor.list_since(limits.lookback_s)
    skip = taken_versions(cursor.recent)
    started = cursor.scan_started
    after = cursor.scan_after
    taken: list[RawObject] = []
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
            if (
                obj is not None
                and not is_taken(obj, skip)
                and (low is None or datetime.fromisoformat(obj.last_modified) >= low)
            ):
                if not fits_batch(taken, obj, limits):
                    full = True
                    break
                taken.append(obj)
            after = key
        if not page.get("IsTruncated"):
            done = not full
        if done or full or pages >= limits.scan_pages or clock() - t0 >= limits.scan_seconds:
            break
    recent = remember(cursor.recent, taken)
    if done:
        out = replace(cursor, since=started, recent=recent, ticks=0, scan_after=None, scan_started=None)
    else:
        out = replace(cursor, recent=recent, scan_after=after, scan_started=started)
    return taken, _prune(out, limits)


def append_tick(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, taken=()):
    """Add new objects in key order after `start_after` to `taken`, reading only the pages one batch needs."""
    recent = taken_versions(cursor.recent)
    taken = list(taken)
    before = len(taken)
    start_after = cursor.start_after
    while True:
        page = _page(client, bucket, prefix, start_after, limits)
        full = False
        for item in page.get("Contents", []):
            obj = listed_object(item)
            if obj is None or is_taken(obj, recent):
                start_after = item["Key"]
                continue
            if not fits_batch(taken, obj, limits):
                full = True
                break
            taken.append(obj)
            start_after = obj.key
        if full or not page.get("IsTruncated"):
            break
    recent_out = remember(cursor.recent, taken[before:])
    return taken, _prune(replace(cursor, start_after=start_after, recent=recent_out), limits)


def plan_tick(client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, clock=time.monotonic):
    """One sensor tick: the objects of the next batch and the cursor after it."""
    due = cursor.since is None or (limits.full_scan_every > 0 and cursor.ticks + 1 >= limits.full_scan_every)
    taken: list[RawObject] = []
    kind = "append"
    if cursor.scanning or due:
        taken, cursor = scan_step(client, bucket, prefix, cursor, limits, clock)
        kind = "scan+append"
    else:
        cursor = replace(cursor, ticks=cursor.ticks + 1)
    if len(taken) < limits.max_objects:
        taken, cursor = append_tick(client, bucket, prefix, cursor, limits, taken)
    if len(taken) < limits.max_objects:
        from pipeline_project.ingest.listing.sources import source_tick

        taken, cursor = source_tick(client, bucket, prefix, cursor, limits, taken, clock)
    return taken, replace(cursor, kind=kind)
