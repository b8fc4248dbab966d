"""The sensor's listing plan: every object lands in exactly one batch, whatever the key order and tick timing,
and an append-style tick reads the new objects only (its cost does not grow with what was ingested)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from pipeline_project.listing import Limits, TickCursor, full_tick, plan_tick
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
LIMITS = Limits(max_objects=10, max_bytes=1 << 30, full_scan_every=5)


def obj(key: str, seconds: float, size: int = 10) -> dict:
    return {"Key": key, "ETag": '"e"', "Size": size, "LastModified": T0 + timedelta(seconds=seconds)}


class Bucket:
    """S3 stand-in with controllable LastModified (S3 stamps whole seconds)."""

    def __init__(self):
        self.client = MemoryS3Client({})

    def put(self, key: str, second: int) -> None:
        self.client.objects[("b", key)] = (b"x" * 10, T0 + timedelta(seconds=second))

    def list_all(self, since):
        items = [
            {"Key": k, "ETag": '"e"', "Size": len(d), "LastModified": t}
            for (b, k), (d, t) in sorted(self.client.objects.items())
        ]
        self.client.listed_keys += len(items)
        items.sort(key=lambda o: o["LastModified"])
        return [o for o in items if since is None or o["LastModified"] > since]

    def tick(self, cursor: TickCursor, limits: Limits = LIMITS):
        return plan_tick(self.client, "b", "raw/", cursor, limits, self.list_all)


def test_first_tick_takes_everything_oldest_first():
    taken, cursor = full_tick([obj("raw/b", 2), obj("raw/a", 1)], TickCursor(), LIMITS)
    assert [o.key for o in taken] == ["raw/a", "raw/b"]
    assert cursor.since == (T0 + timedelta(seconds=2)).isoformat()
    assert cursor.start_after == "raw/b"


def test_same_second_arrival_is_not_lost_and_seen_keys_are_not_repeated():
    _, cursor = full_tick([obj("raw/a", 1)], TickCursor(), LIMITS)
    taken, cursor2 = full_tick([obj("raw/a", 1), obj("raw/late", 1)], cursor, LIMITS)
    assert [o.key for o in taken] == ["raw/late"]
    again, _ = full_tick([obj("raw/a", 1), obj("raw/late", 1)], cursor2, LIMITS)
    assert again == []


def test_a_batch_closes_at_max_objects_or_max_bytes():
    listing = [obj(f"raw/{i:02d}", i, size=400) for i in range(6)]
    taken, _ = full_tick(listing, TickCursor(), Limits(max_objects=4, max_bytes=1000, full_scan_every=5))
    assert [o.key for o in taken] == ["raw/00", "raw/01"]
    one, _ = full_tick([obj("raw/huge", 1, size=5000)], TickCursor(), Limits(4, 1000, 5))
    assert [o.key for o in one] == ["raw/huge"]  # larger than max_bytes: a batch of its own


def test_cursor_round_trips_through_json():
    c = TickCursor(since=T0.isoformat(), edge_keys=("raw/a",), start_after="raw/a", recent=(("raw/b", "x"),), ticks=3)
    assert TickCursor.from_json(c.to_json()) == c
    assert TickCursor.from_json(None) == TickCursor()


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


def test_every_object_lands_in_exactly_one_batch_under_random_keys_and_ticks():
    for seed in range(25):
        rng = random.Random(seed)
        bucket = Bucket()
        cursor, taken_keys, second = TickCursor(), [], 0
        expected = set()
        for step in range(60):
            for _ in range(rng.randint(0, 6)):  # arrivals: mostly appended, some land before old keys
                key = f"raw/{rng.choice(['a', 'm', 'z'])}/{step:03d}-{rng.randint(0, 10**6):07d}"
                if key not in expected:
                    bucket.put(key, second)
                    expected.add(key)
            if rng.random() < 0.5:
                second += 1  # several arrivals in one second, as S3 stamps them
            if rng.random() < 0.7:  # the daemon may skip ticks (stopped, slow)
                taken, cursor = bucket.tick(cursor, Limits(rng.randint(1, 8), 1 << 30, rng.choice([1, 3, 5])))
                taken_keys += [o.key for o in taken]
                cursor = TickCursor.from_json(cursor.to_json())  # the cursor survives a daemon restart
        for _ in range(200):  # drain
            taken, cursor = bucket.tick(cursor, Limits(8, 1 << 30, 3))
            taken_keys += [o.key for o in taken]
        assert len(taken_keys) == len(set(taken_keys)), f"seed {seed}: an object landed in two batches"
        assert set(taken_keys) == expected, f"seed {seed}: lost {sorted(expected - set(taken_keys))[:5]}"
        assert len(cursor.recent) <= len(expected)
