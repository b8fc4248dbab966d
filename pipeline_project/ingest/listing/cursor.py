"""The raw S3 sensor's cursor: what every tick has taken, and the limits a tick keeps to (`plan.py`, `packing.py`)."""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
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
    max_objects: int  # per batch
    max_bytes: int  # per batch
    full_scan_every: int  # 0: only the first tick scans
    scan_pages: int = 10  # at most this many pages of the scan per tick
    scan_seconds: float = 20.0  # and no new page after this long (a tick reads at least one)
    page_keys: int = 1000
    lookback_s: float = CURSOR_MARGIN_S  # a scan takes objects stamped this long before the previous scan began
    source_depth: int = 0  # > 0: the prefixes this many levels down get cursors of their own (listing_sources)
    max_sources: int = 200  # at most this many of them keep a position in the cursor
    discover_pages: int = 5  # pages of the walk that finds new source prefixes, per tick
    source_seconds: float = 15.0  # reading the sources starts no new one after this long
    max_batches: int = 1  # batches per tick (`packing.Packer`; plan_batches)
    tick_seconds: float | None = None  # plan_batches opens no new batch this long into the tick (None: no bound)


def listed_object(obj: dict) -> RawObject | None:
    """A listing entry as a `RawObject`; None for a folder marker."""
    return None if obj["Key"].endswith("/") else RawObject.from_listing(obj)


def server_time(page: dict) -> datetime:
    date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        return parsedate_to_datetime(date)
    return datetime.now(timezone.utc) - timedelta(seconds=CLOCK_SKEW_S)
