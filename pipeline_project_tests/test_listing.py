"""The sensor's listing plan: every object lands in exactly one batch, whatever the key order and tick timing,
and an append-style tick reads the new objects only (its cost does not grow with what was ingested)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from pipeline_project.ingest.listing.plan import Limits, TickCursor, plan_tick
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
LIMITS = Limits(max_objects=10, max_bytes=1 << 30, full_scan_every=5)


class Bucket:
    """S3 stand-in with a controllable clock: LastModified and the listings' Date header (whole seconds)."""

    def __init__(self):
        self.second = 0
        self.client = MemoryS3Client({}, clock=lambda: T0 + timedelta(seconds=self.second))

    def put(self, key: str, second: int | None = None, size: int = 10, body: bytes | None = None) -> None:
        self.second = self.second if second is None else second
        self.client.objects[("b", key)] = (body or b"x" * size, T0 + timedelta(seconds=self.second))

    def tick(self, cursor: TickCursor, limits: Limits = LIMITS, clock=None):
        if clock is None:
            return plan_tick(self.client, "b", "raw/", cursor, limits)
        return plan_tick(self.client, "b", "raw/", cursor, limits, clock)

    def drain(self, cursor: TickCursor, limits: Limits, ticks: int = 500) -> tuple[list[str], TickCursor]:
        keys = []
        for _ in range(ticks):
            taken, cursor = self.tick(cursor, limits)
            keys += [o.key for o in taken]
        return keys, cursor


def test_the_first_tick_takes_the_backlog_in_key_order_and_stamps_the_servers_time():
    bucket = Bucket()
    for key, second in [("raw/b", 2), ("raw/a", 5), ("raw/c", 1)]:
        bucket.put(key, second)
    bucket.second = 9
    taken, cursor = bucket.tick(TickCursor(), Limits(2, 1 << 30, 5))
    assert [o.key for o in taken] == ["raw/a", "raw/b"]
    assert cursor.since == (T0 + timedelta(seconds=9)).isoformat() and not cursor.scanning
    assert cursor.start_after == "raw/b"
    taken, cursor = bucket.tick(cursor, Limits(2, 1 << 30, 5))
    assert [o.key for o in taken] == ["raw/c"] and cursor.kind == "append"


def test_a_batch_closes_at_max_objects_or_max_bytes():
    bucket = Bucket()
    for i in range(6):
        bucket.put(f"raw/{i:02d}", i, size=400)
    taken, _ = bucket.tick(TickCursor(), Limits(max_objects=4, max_bytes=1000, full_scan_every=5))
    assert [o.key for o in taken] == ["raw/00", "raw/01"]
    bucket = Bucket()
    bucket.put("raw/huge", 1, size=5000)
    one, _ = bucket.tick(TickCursor(), Limits(4, 1000, 5))
    assert [o.key for o in one] == ["raw/huge"]  # larger than max_bytes: a batch of its own


def test_cursor_round_trips_through_json_and_reads_the_previous_format():
    c = TickCursor(since=T0.isoformat(), start_after="raw/a", recent=(("raw/b", "x", "e1"),), ticks=3,
                   scan_after="raw/0", scan_started=T0.isoformat(), complete_from=T0.isoformat())  # fmt: skip
    assert TickCursor.from_json(c.to_json()) == c
    assert TickCursor.from_json(None) == TickCursor()
    many = tuple((f"raw/2026/01/01/{i:06d}.jsonl", T0.isoformat(), f"{i:032x}") for i in range(5000))
    big = TickCursor(since=T0.isoformat(), start_after=many[-1][0], recent=many)
    assert TickCursor.from_json(big.to_json()) == big
    assert len(big.to_json()) < len(json.dumps(many)) / 5, "a long `recent` is stored compressed"
    t0 = T0.isoformat()
    old = {"since": t0, "edge_keys": ["raw/b"], "start_after": "raw/b", "recent": [["raw/b", t0]], "ticks": 7}
    read = TickCursor.from_json(json.dumps(old))
    assert (read.since, read.start_after, read.recent, read.ticks) == (
        T0.isoformat(),
        "raw/b",
        (("raw/b", T0.isoformat(), ""),),
        7,
    )
    assert not read.scanning


def test_a_cursor_of_the_previous_format_goes_on_without_loss_or_repeats():
    bucket = Bucket()
    for i, key in enumerate(["raw/a", "raw/b", "raw/c"]):
        bucket.put(key, i)
    # the old full listing took a and b (since = b's stamp); c came after it
    t0, t1 = T0.isoformat(), (T0 + timedelta(seconds=1)).isoformat()
    old = TickCursor.from_json(
        json.dumps({"since": t1, "edge_keys": ["raw/a", "raw/b"], "start_after": "raw/b",
                    "recent": [["raw/a", t0], ["raw/b", t1]], "ticks": 4})
    )  # fmt: skip
    bucket.put("raw/aa", 3)  # out of order, after the old listing
    keys, _ = bucket.drain(old, Limits(10, 1 << 30, 5), ticks=12)
    assert sorted(keys) == ["raw/aa", "raw/c"]


def test_an_append_tick_reads_only_new_keys_however_many_came_before():
    bucket = Bucket()
    for i in range(3000):
        bucket.put(f"raw/2026/01/01/{i:06d}.jsonl", 0)
    cursor = TickCursor()
    while True:  # ingest the backlog, 10 objects a batch
        taken, cursor = bucket.tick(cursor, Limits(10, 1 << 30, 0))
        if not taken:
            break
    bucket.client.listed_keys = 0
    for i in range(5):
        bucket.put(f"raw/2026/01/02/{i:06d}.jsonl", 10)
    taken, cursor = bucket.tick(cursor, Limits(10, 1 << 30, 0))
    assert len(taken) == 5 and cursor.kind == "append"
    assert bucket.client.listed_keys == 5, "an append tick lists the new keys, not the 3000 before them"


def test_a_longer_lookback_does_not_take_again_what_a_shorter_one_forgot():
    bucket = Bucket()
    bucket.put("raw/a", 10)
    bucket.put("raw/b", 100)
    # the previous format's cursor: `a` was taken and forgotten (stamped long before `since` minus 2 s)
    old = {"since": (T0 + timedelta(seconds=100)).isoformat(), "edge_keys": ["raw/b"], "start_after": "raw/b",
           "recent": [["raw/b", (T0 + timedelta(seconds=100)).isoformat()]], "ticks": 0}  # fmt: skip
    limits = Limits(10, 1 << 30, full_scan_every=1, lookback_s=900.0)
    bucket.put("raw/aa", 101)  # out of order, after the old listing
    bucket.second = 200
    keys, cursor = bucket.drain(TickCursor.from_json(json.dumps(old)), limits, ticks=5)
    assert keys == ["raw/aa"]
    # and a lookback raised in the config on this format's cursor
    keys, _ = bucket.drain(cursor, replace(limits, lookback_s=10_000.0), ticks=5)
    assert keys == []


def backlog(bucket: Bucket, n: int, limits: Limits) -> TickCursor:
    for i in range(n):
        bucket.put(f"raw/{i:06d}.jsonl", 0)
    bucket.second = 10
    cursor = TickCursor()
    while True:
        taken, cursor = bucket.tick(cursor, limits)
        if not taken and not cursor.scanning:
            return cursor


SMALL_PAGES = Limits(max_objects=1000, max_bytes=1 << 30, full_scan_every=2, scan_pages=3, page_keys=100)


def test_a_scan_reads_a_bounded_number_of_pages_per_tick_and_finds_keys_that_land_out_of_order():
    bucket = Bucket()
    cursor = backlog(bucket, 3000, SMALL_PAGES)
    assert cursor.start_after == "raw/002999.jsonl"
    bucket.second = 20
    bucket.put("raw/000500x.jsonl")  # sorts among the old keys: only a scan finds it
    found, ticks = [], 0
    while not found:
        bucket.client.listed_keys = 0
        taken, cursor = bucket.tick(cursor, SMALL_PAGES)
        ticks += 1
        assert bucket.client.listed_keys <= 3 * 100, "a tick reads at most scan_pages pages of the scan"
        found += [o.key for o in taken]
        assert ticks < 30
    assert found == ["raw/000500x.jsonl"]
    assert ticks >= 2, "the scan went on from its position over several ticks"
    bucket.second = 30
    keys, cursor = bucket.drain(cursor, SMALL_PAGES, ticks=40)
    assert keys == [] and not cursor.recent, "nothing again, and nothing left to remember"


def test_a_key_that_lands_behind_a_running_scan_is_found_by_the_next_one():
    bucket = Bucket()
    limits = Limits(max_objects=1000, max_bytes=1 << 30, full_scan_every=1, scan_pages=1, page_keys=100)
    cursor = backlog(bucket, 1000, limits)
    bucket.second = 20
    taken, cursor = bucket.tick(cursor, limits)  # the scan starts: its first page passes raw/000099
    assert taken == [] and cursor.scanning and cursor.scan_after == "raw/000099.jsonl"
    # behind the scan's position, stamped the second before the scan began (an upload that started then
    # and became visible after the scan's first page): the margin on `since` finds it
    bucket.put("raw/000050x.jsonl", 19)
    bucket.put("raw/000700x.jsonl", 21)  # ahead of it
    keys, cursor = bucket.drain(cursor, limits, ticks=30)
    assert sorted(keys) == ["raw/000050x.jsonl", "raw/000700x.jsonl"]
    assert keys.index("raw/000700x.jsonl") < keys.index("raw/000050x.jsonl"), "the running scan took the one ahead"


def test_a_slow_upload_stamped_before_the_scan_began_is_found_within_the_lookback():
    def run(lookback_s: float) -> list[str]:
        bucket = Bucket()
        limits = Limits(1000, 1 << 30, full_scan_every=1, scan_pages=1, page_keys=100, lookback_s=lookback_s)
        cursor = backlog(bucket, 1000, limits)
        bucket.second = 400
        _, cursor = bucket.tick(cursor, limits)  # a scan starts at 400 s and passes raw/000099
        # a multipart upload initiated at 100 s completes now, behind the scan: stamped 300 s before it began
        bucket.put("raw/000050x.jsonl", 100)
        bucket.second = 401
        keys, _ = bucket.drain(cursor, limits, ticks=30)
        return keys

    assert run(900.0) == ["raw/000050x.jsonl"]
    assert run(2.0) == [], "outside the lookback: the gap the README names"


def test_a_scan_stops_where_the_append_listing_begins():
    bucket = Bucket()
    limits = Limits(max_objects=10, max_bytes=1 << 30, full_scan_every=1, scan_pages=3, page_keys=100)
    for i in range(3000):
        bucket.put(f"raw/{i:06d}.jsonl", 0)
    bucket.second = 10
    # a sensor that has taken the first 1000 keys, with 2000 still to go
    cursor = TickCursor(since=(T0 + timedelta(seconds=5)).isoformat(), start_after="raw/000999.jsonl")
    ticks = 0
    taken, cursor = bucket.tick(cursor, limits)
    while cursor.scanning:
        assert len(taken) == 10 and taken[0].key > "raw/000999.jsonl", "the scan takes nothing; append goes on"
        taken, cursor = bucket.tick(cursor, limits)
        ticks += 1
    assert ticks <= 3, "1000 keys, 300 a tick: the scan ends at start_after, not at the prefix's end"


def test_a_scan_starts_no_page_after_its_time_budget():
    bucket = Bucket()
    limits = Limits(max_objects=1000, max_bytes=1 << 30, full_scan_every=1, scan_pages=50, page_keys=100,
                    scan_seconds=5.0)  # fmt: skip
    cursor = backlog(bucket, 2000, limits)
    seconds = iter(range(0, 1000, 2))  # each page takes 2 s of the fake clock
    _, cursor = bucket.tick(cursor, limits, clock=lambda: next(seconds))
    assert cursor.scanning and cursor.scan_after == "raw/000299.jsonl", "3 pages: at 0, 2 and 4 s; none at 6 s"


def test_every_object_lands_in_exactly_one_batch_under_random_keys_and_ticks():
    for seed in range(25):
        rng = random.Random(seed)
        bucket = Bucket()
        cursor, taken_keys, second = TickCursor(), [], 0
        expected = set()
        page_keys, scan_pages = rng.choice([2, 5, 1000]), rng.choice([1, 2, 10])
        lookback, early = rng.choice([(2.0, 0), (60.0, 20)])  # objects stamped up to `early` s before they list
        for step in range(60):
            for _ in range(rng.randint(0, 6)):  # arrivals: mostly appended, some land before old keys
                key = f"raw/{rng.choice(['a', 'm', 'z'])}/{step:03d}-{rng.randint(0, 10**6):07d}"
                if key not in expected:
                    bucket.put(key, max(0, second - rng.randint(0, early)))
                    bucket.second = second
                    expected.add(key)
            if rng.random() < 0.5:
                second += 1  # several arrivals in one second, as S3 stamps them
            if rng.random() < 0.7:  # the daemon may skip ticks (stopped, slow)
                limits = Limits(rng.randint(1, 8), 1 << 30, rng.choice([0, 1, 3, 5]), scan_pages, page_keys=page_keys,
                                lookback_s=lookback)  # fmt: skip
                taken, cursor = bucket.tick(cursor, limits)
                taken_keys += [o.key for o in taken]
                cursor = TickCursor.from_json(cursor.to_json())  # the cursor survives a daemon restart
        for _ in range(200):  # drain: scans of 250 keys per tick
            taken, cursor = bucket.tick(cursor, Limits(8, 1 << 30, 3, scan_pages=50, page_keys=5, lookback_s=lookback))
            taken_keys += [o.key for o in taken]
        assert len(taken_keys) == len(set(taken_keys)), f"seed {seed}: an object landed in two batches"
        assert set(taken_keys) == expected, f"seed {seed}: lost {sorted(expected - set(taken_keys))[:5]}"
        assert len(cursor.recent) <= len(expected)


def test_an_object_overwritten_after_it_was_taken_is_taken_again_once_per_version():
    for overwrite_at in (0, 1, 30, 2000):  # same second as the take, within the lookback, long after it
        bucket = Bucket()
        limits = Limits(10, 1 << 30, full_scan_every=1, lookback_s=900.0)
        bucket.put("raw/a", 0, body=b"v1")
        bucket.put("raw/b", 0, body=b"b")
        taken, cursor = bucket.tick(TickCursor(), limits)
        assert [o.key for o in taken] == ["raw/a", "raw/b"]
        bucket.put("raw/a", overwrite_at, body=b"v2")  # a new version: another ETag
        bucket.second = overwrite_at + 1
        versions = []
        for _ in range(6):
            taken, cursor = bucket.tick(TickCursor.from_json(cursor.to_json()), limits)
            versions += [(o.key, o.etag) for o in taken]
            bucket.second += 5
        v2 = bucket.client.list_objects_v2(Bucket="b", Prefix="raw/a")["Contents"][0]["ETag"].strip('"')
        assert versions == [("raw/a", v2)], f"overwritten at {overwrite_at} s: {versions}"
        bucket.put("raw/a", bucket.second, body=b"v2")  # the same content again: the same ETag, not new input
        keys, _ = bucket.drain(cursor, limits, ticks=5)
        assert keys == []


# ---- source prefixes with cursors of their own (issue 27 item 14) ---------------------------------------

SOURCES = Limits(max_objects=50, max_bytes=1 << 30, full_scan_every=0, source_depth=1)


def test_a_new_key_under_a_prefix_that_sorts_earlier_is_found_on_the_next_tick_without_a_scan():
    bucket = Bucket()
    for i in range(30):
        bucket.put(f"raw/web/{i:04d}.txt", 0)
    _, cursor = bucket.drain(TickCursor(), SOURCES, ticks=3)
    assert cursor.start_after == "raw/web/0029.txt"
    for second, key in enumerate(["raw/books/0000.txt", "raw/demo-1/a.txt", "raw/books/0001.txt",
                                  "raw/web/0030.txt", "raw/a/x.txt", "raw/demo-1/b.txt"], start=10):  # fmt: skip
        bucket.put(key, second)
        taken, cursor = bucket.tick(TickCursor.from_json(cursor.to_json()), SOURCES)
        assert [o.key for o in taken] == [key], f"{key} waits for a scan"
    keys, _ = bucket.drain(cursor, SOURCES, ticks=5)
    assert keys == []


def test_uploads_interleaved_across_three_prefixes_are_each_taken_on_the_next_tick():
    bucket = Bucket()
    cursor = TickCursor()
    for i in range(40):
        key = f"raw/{'amz'[i % 3]}-source/{i:04d}.jsonl"
        bucket.put(key, i)
        taken, cursor = bucket.tick(cursor, SOURCES)
        assert [o.key for o in taken] == [key]


def test_source_cursors_stay_bounded_and_a_dropped_source_is_left_to_the_scan():
    bucket = Bucket()
    limits = replace(SOURCES, max_sources=20, full_scan_every=3, discover_pages=2, page_keys=100)
    for i in range(300):
        bucket.put(f"raw/s{i:04d}/0.txt", 0)
    _, cursor = bucket.drain(TickCursor(), limits, ticks=40)
    assert len(cursor.sources) <= 20 and len(cursor.to_json()) < 20_000
    dropped = "raw/s0000/1.txt"  # its source lost its position; the scan finds the key, once
    bucket.put(dropped, 50)
    bucket.second = 60
    keys, cursor = bucket.drain(cursor, limits, ticks=40)
    assert keys == [dropped]


def test_every_object_lands_in_exactly_one_batch_with_source_cursors():
    for seed in range(15):
        rng = random.Random(seed)
        bucket = Bucket()
        cursor, taken_keys, expected = TickCursor(), [], set()
        for step in range(50):
            for _ in range(rng.randint(0, 5)):
                key = f"raw/{rng.choice(['a', 'm', 'z', f'n{step % 7}'])}/{rng.randint(0, 10**6):07d}"
                if key not in expected:
                    bucket.put(key, step)
                    expected.add(key)
            limits = Limits(rng.randint(1, 8), 1 << 30, rng.choice([0, 2, 5]), page_keys=rng.choice([2, 5, 1000]),
                            source_depth=1, max_sources=rng.choice([2, 200]), discover_pages=rng.choice([1, 5]))  # fmt: skip
            taken, cursor = bucket.tick(cursor, limits)
            taken_keys += [o.key for o in taken]
            cursor = TickCursor.from_json(cursor.to_json())
        for _ in range(200):
            taken, cursor = bucket.tick(cursor, replace(SOURCES, full_scan_every=3, scan_pages=50, page_keys=5))
            taken_keys += [o.key for o in taken]
        assert len(taken_keys) == len(set(taken_keys)), f"seed {seed}: an object landed in two batches"
        assert set(taken_keys) == expected, f"seed {seed}: lost {sorted(expected - set(taken_keys))[:5]}"
