"""A tick registers as many batches as its new objects fill (issue 38 section 2), over the in-memory S3 stand-in:
bounded by `max_batches` and the tick's time, the cursor past exactly the objects of the written manifests, and a
tick that dies midway (some manifests written, nothing registered) followed by another takes each object once."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import timedelta

import dagster as dg
import pytest

from pipeline_project.definitions import defs
from pipeline_project.defs.resources.layout import IntakeConfig, PipelineLayout
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.ingest.listing.intake import intake_tick
from pipeline_project.ingest.listing.plan import Limits, TickCursor, plan_batches, plan_tick
from pipeline_project.ingest.manifest import MANIFEST_PREFIX, make_batch_id, read_manifest
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client, MemoryS3Resource
from pipeline_project_tests.test_listing import T0, Bucket

MANY = Limits(max_objects=10, max_bytes=1 << 30, full_scan_every=5, max_batches=100)


class Crash(Exception):
    """The tick's process dies here."""


class CrashingClient:
    """The stand-in S3 client whose manifest writes fail after `puts_left` of them succeed (None: never)."""

    def __init__(self, client: MemoryS3Client, puts_left: int | None = None):
        self._client = client
        self.puts_left = puts_left
        self.manifest_puts = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put_object(self, Bucket: str, Key: str, Body: bytes, **kw):
        if Key.startswith(MANIFEST_PREFIX):
            if self.puts_left is not None and self.puts_left <= 0:
                raise Crash(Key)
            if self.puts_left is not None:
                self.puts_left -= 1
            self.manifest_puts += 1
        return self._client.put_object(Bucket=Bucket, Key=Key, Body=Body, **kw)


def fill(bucket: Bucket, n: int, start: int = 0, second: int = 0, size: int = 10) -> list[str]:
    keys = [f"raw/{i:06d}.jsonl" for i in range(start, start + n)]
    for k in keys:
        bucket.put(k, second, size=size)
    bucket.second = second + 10
    return keys


def test_one_tick_takes_every_new_object_in_as_many_batches_as_they_fill():
    bucket = Bucket()
    keys = fill(bucket, 35)
    plan = plan_batches(bucket.client, "b", "raw/", TickCursor(), MANY)
    assert [len(b) for b in plan.batches] == [10, 10, 10, 5]
    assert [o.key for o in plan.objects] == keys and plan.stopped_by is None
    assert plan.cursor.start_after == keys[-1]
    again = plan_batches(bucket.client, "b", "raw/", plan.cursor, MANY)
    assert again.batches == ()


def test_the_same_objects_are_cut_into_the_same_batches_as_one_batch_ticks_would_take():
    bucket = Bucket()
    fill(bucket, 47)
    many = plan_batches(bucket.client, "b", "raw/", TickCursor(), MANY)
    one_by_one, cursor = [], TickCursor()
    while True:
        taken, cursor = plan_tick(bucket.client, "b", "raw/", cursor, replace(MANY, max_batches=1))
        if not taken:
            break
        one_by_one.append(tuple(taken))
    assert list(many.batches) == one_by_one


def test_batches_close_at_max_bytes_and_a_large_object_gets_a_batch_of_its_own():
    bucket = Bucket()
    for i, size in enumerate([400, 400, 400, 5000, 100, 100]):
        bucket.put(f"raw/{i:02d}", i, size=size)
    bucket.second = 20
    plan = plan_batches(bucket.client, "b", "raw/", TickCursor(), Limits(4, 1000, 5, max_batches=10))
    assert [[o.key for o in b] for b in plan.batches] == [
        ["raw/00", "raw/01"],
        ["raw/02"],
        ["raw/03"],
        ["raw/04", "raw/05"],
    ]


def test_max_batches_bounds_a_tick_and_the_next_one_goes_on_where_it_stopped():
    bucket = Bucket()
    keys = fill(bucket, 35)
    limits = replace(MANY, max_batches=2)
    first = plan_batches(bucket.client, "b", "raw/", TickCursor(), limits)
    assert [len(b) for b in first.batches] == [10, 10] and first.stopped_by == "batches"
    assert first.cursor.start_after == keys[19], "the cursor stops at the last object of the last batch"
    second = plan_batches(bucket.client, "b", "raw/", first.cursor, limits)
    assert [o.key for o in second.objects] == keys[20:35] and second.stopped_by is None


def test_no_new_batch_opens_past_the_ticks_time_budget():
    bucket = Bucket()
    keys = fill(bucket, 100)
    seconds = iter(range(10_000))  # the fake clock moves one second each time it is read
    limits = replace(MANY, tick_seconds=5.0, page_keys=10, full_scan_every=0)
    plan = plan_batches(bucket.client, "b", "raw/", TickCursor(), limits, clock=lambda: next(seconds))
    assert 1 <= len(plan.batches) < 10 and plan.stopped_by == "time"
    assert all(len(b) == 10 for b in plan.batches), "the batch open at the deadline still fills"
    assert plan.cursor.start_after == plan.objects[-1].key
    rest = plan_batches(bucket.client, "b", "raw/", plan.cursor, MANY)
    assert [o.key for o in plan.objects + rest.objects] == keys


def test_a_tick_that_dies_after_some_manifests_is_retaken_under_the_same_batch_ids():
    bucket = Bucket()
    keys = fill(bucket, 35)
    crashing = CrashingClient(bucket.client, puts_left=2)
    with pytest.raises(Crash):  # manifests 1 and 2 are written, then the process dies: nothing is registered
        intake_tick(crashing, "b", "raw/", TickCursor(), MANY)
    written = {
        k.removeprefix(MANIFEST_PREFIX).removesuffix(".json")
        for (_, k) in bucket.client.objects
        if k.startswith(MANIFEST_PREFIX)
    }
    assert len(written) == 2
    again = CrashingClient(bucket.client)
    tick = intake_tick(again, "b", "raw/", TickCursor(), MANY)  # the stored cursor did not move
    ids = [m.batch_id for m in tick.manifests]
    assert written <= set(ids), "the retick names the batches of the dead tick the same"
    assert again.manifest_puts == 2, "and writes only the two manifests the dead tick did not"
    listed = [o.key for m in tick.manifests for o in read_manifest(bucket.client, "b", m.batch_id).objects]
    assert listed == keys
    assert intake_tick(bucket.client, "b", "raw/", tick.cursor, MANY).manifests == ()


def test_a_tick_that_dies_after_every_manifest_but_before_its_result_is_stored_takes_nothing_twice():
    bucket = Bucket()
    fill(bucket, 25)
    lost = intake_tick(bucket.client, "b", "raw/", TickCursor(), MANY)  # its SensorResult never reached the daemon
    fill(bucket, 8, start=25, second=30)  # new objects land before the next tick: the last batch's cut changes
    tick = intake_tick(bucket.client, "b", "raw/", TickCursor(), MANY)
    assert [m.batch_id for m in tick.manifests][:2] == [m.batch_id for m in lost.manifests][:2]
    listed = Counter(o.key for m in tick.manifests for o in m.objects)
    assert len(listed) == 33 and set(listed.values()) == {1}


def registered_keys(client, ids) -> Counter:
    return Counter(o.key for b in ids for o in read_manifest(client, "b", b).objects)


def test_every_object_lands_in_exactly_one_registered_batch_under_random_ticks_and_crashes():
    for seed in range(20):
        rng = random.Random(seed)
        bucket = Bucket()
        cursor, registered, expected = TickCursor(), [], set()
        for step in range(40):
            for _ in range(rng.randint(0, 25)):  # mostly appended; some sort among old keys or in other sources
                key = f"raw/{rng.choice(['a', 'm', 'z', f'n{step % 5}'])}/{step:03d}-{rng.randint(0, 10**6):07d}"
                if key not in expected:
                    bucket.put(key, step, size=rng.choice([1, 10, 300]))
                    expected.add(key)
            bucket.second = step
            limits = Limits(rng.randint(1, 8), rng.choice([500, 1 << 30]), rng.choice([0, 1, 3]),
                            page_keys=rng.choice([3, 1000]), source_depth=rng.choice([0, 1]),
                            max_batches=rng.choice([1, 2, 5, 100]))  # fmt: skip
            client = CrashingClient(bucket.client, puts_left=rng.choice([None, None, 0, 1, 3]))
            try:
                tick = intake_tick(client, "b", "raw/", cursor, limits)
            except Crash:
                continue  # manifests written, nothing registered, the cursor stays
            if rng.random() < 0.15:
                continue  # every manifest written, then the daemon died before storing the result
            registered += [m.batch_id for m in tick.manifests]
            cursor = TickCursor.from_json(tick.cursor.to_json())
        drain = Limits(8, 1 << 30, 3, scan_pages=50, page_keys=5, source_depth=1, max_batches=100)
        for _ in range(60):
            bucket.second += 5
            tick = intake_tick(bucket.client, "b", "raw/", cursor, drain)
            registered += [m.batch_id for m in tick.manifests]
            cursor = tick.cursor
        assert len(registered) == len(set(registered)), f"seed {seed}: a batch registered twice"
        listed = registered_keys(bucket.client, registered)
        assert set(listed) == expected, f"seed {seed}: lost {sorted(expected - set(listed))[:5]}"
        assert set(listed.values()) == {1}, f"seed {seed}: {[k for k, n in listed.items() if n > 1][:5]}"


def test_the_sensor_requests_one_run_and_one_partition_per_batch_with_the_cursor_past_all(tmp_path):
    store = f"intake-{tmp_path.name}"
    s3 = MemoryS3Resource(store=store)
    client = s3.get_client()
    for i in range(23):
        client.objects[("pipeline", f"raw/{i:04d}.txt")] = (b"x" * 10, T0 + timedelta(seconds=i))
    layout = PipelineLayout(intake=IntakeConfig(max_objects_per_batch=5))
    with dg.instance_for_test() as instance:
        with dg.build_sensor_context(
            instance=instance, resources={"s3": s3, "layout": layout}, definitions=defs
        ) as ctx:
            result = raw_s3_sensor(ctx)
        ids = [r.run_key for r in result.run_requests]
        assert len(ids) == 5 and [r.partition_key for r in result.run_requests] == ids
        assert list(result.dynamic_partitions_requests[0].partition_keys) == ids
        batches = [read_manifest(client, "pipeline", b).objects for b in ids]
        assert [make_batch_id(list(b)) for b in batches] == ids
        assert sorted(o.key for b in batches for o in b) == sorted(
            k for (_, k) in client.objects if k.startswith("raw/")
        )
        with dg.build_sensor_context(
            instance=instance, cursor=result.cursor, resources={"s3": s3, "layout": layout}, definitions=defs
        ) as ctx:
            idle = raw_s3_sensor(ctx)
        assert not idle.run_requests and idle.skip_reason
