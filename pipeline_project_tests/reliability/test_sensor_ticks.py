"""The raw S3 sensor across daemon stops, tick by tick (`build_sensor_context` against the throw-away S3 server).

A deployed daemon ticks, stores the cursor the tick returned, adds the partitions it requested and launches its
runs (one per run key). Here the test is that daemon, so it can stop it between ticks, let objects arrive while
it is down (some in the same second as the cursor's edge), restart it with the stored cursor, and kill it in the
middle of a tick: after the manifest is written but before the cursor and partition are stored. Whatever the
timing, every object lands in exactly one registered batch, and each batch gets exactly one run. Keys grow with
time (an append-only layout, which the sensor's cheap append listing follows), except in `out-of-order-keys`,
whose keys the sensor's periodic scan (`full_scan_every` ticks) must find.
The real daemon on the throw-away stack is killed in test_dagster_faults.py.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import pytest

from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources import build_resources
from pipeline_project.defs.resources.layout import IntakeConfig, PipelineLayout
from pipeline_project.ingest.listing.plan import TickCursor
from pipeline_project.ingest.manifest import read_manifest
from pipeline_project_harness.reliability.sensor_daemon import Daemon

pytestmark = pytest.mark.stack


@pytest.fixture
def world(healthy_stack):
    uid = uuid.uuid4().hex[:8]
    layout = PipelineLayout(raw_prefix=f"rel-{uid}/raw/", intake=IntakeConfig(full_scan_every=FULL_SCAN_EVERY))
    res = build_resources(healthy_stack.settings())
    s3 = res["s3"].get_client()
    with dg.instance_for_test() as instance:
        daemon = Daemon(instance, {"s3": res["s3"], "layout": layout})
        keys: list[str] = []

        def upload(n: int, ordered: bool = True) -> None:
            for _ in range(n):
                name = f"{len(keys):06d}" if ordered else uuid.uuid4().hex[:8]
                key = f"{layout.raw_prefix}{name}.txt"
                s3.put_object(Bucket=layout.bucket, Key=key, Body=f"document {key} " * 20)
                keys.append(key)

        yield daemon, upload, keys, s3, layout


FULL_SCAN_EVERY = 4
SCHEDULES = {
    # each step: ("up", n objects), ("tick",), ("down", seconds the daemon is stopped: no ticks), ("crash",),
    # ("up_any", n objects whose keys sort anywhere)
    "stop-between-ticks": [("up", 3), ("tick",), ("up", 2), ("down", 1.2), ("up", 2), ("tick",), ("up", 1), ("tick",)],
    "same-second-edge": [("up", 2), ("tick",), ("up", 3), ("tick",), ("up", 1), ("down", 0.1), ("up", 1), ("tick",)],
    "crash-mid-tick": [("up", 3), ("crash",), ("up", 2), ("tick",), ("up", 2), ("crash",), ("tick",), ("tick",)],
    "down-while-busy": [("up", 4), ("down", 2.5), ("up", 4), ("down", 1.0), ("up", 1), ("tick",), ("tick",)],
    "out-of-order-keys": [("up_any", 3), ("tick",), ("up_any", 3), ("down", 1.0), ("crash",), ("up", 1), ("tick",)],
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_every_object_lands_in_exactly_one_batch_across_daemon_stops(world, schedule):
    daemon, upload, keys, s3, layout = world
    for step in SCHEDULES[schedule]:
        if step[0] in ("up", "up_any"):
            upload(step[1], ordered=step[0] == "up")
        elif step[0] == "tick":
            daemon.tick()
        elif step[0] == "crash":
            daemon.tick(crash_before_storing=True)
        else:
            time.sleep(step[1])
    for _ in range(FULL_SCAN_EVERY + 1):  # the daemon catches up: one whole scan at least
        daemon.tick()
    registered = daemon.instance.get_dynamic_partitions(batches.name)
    listed = Counter(k for b in registered for k in (o.key for o in read_manifest(s3, layout.bucket, b).objects))
    assert sorted(listed) == sorted(keys), "objects lost or foreign objects batched"
    assert all(n == 1 for n in listed.values()), [k for k, n in listed.items() if n > 1]
    assert set(daemon.run_keys) == set(registered) and all(n == 1 for n in daemon.run_keys.values())


def test_a_scan_over_several_ticks_finds_keys_that_land_behind_and_ahead_of_it(healthy_stack):
    """On the real S3 server, whose Date header and LastModified the scan's `since` relies on."""
    uid = uuid.uuid4().hex[:8]
    layout = PipelineLayout(
        raw_prefix=f"rel-{uid}/raw/", intake=IntakeConfig(full_scan_every=1, full_scan_pages_per_tick=1)
    )
    res = build_resources(healthy_stack.settings())
    s3 = res["s3"].get_client()

    def put(name: str) -> str:
        key = f"{layout.raw_prefix}{name}.txt"
        s3.put_object(Bucket=layout.bucket, Key=key, Body=b"x")
        return key

    with ThreadPoolExecutor(16) as pool:
        keys = list(pool.map(put, (f"{i:06d}" for i in range(1500))))  # 2 pages of 1000 keys
    with dg.instance_for_test() as instance:
        daemon = Daemon(instance, {"s3": res["s3"], "layout": layout})
        while True:  # the backlog, 500 objects a batch
            before = len(daemon.run_keys)
            daemon.tick()
            if len(daemon.run_keys) == before and not TickCursor.from_json(daemon.cursor).scanning:
                break
        time.sleep(3)  # past the cursor's margin
        daemon.tick()  # a scan starts and reads its first page: keys up to 000999
        assert TickCursor.from_json(daemon.cursor).scan_after == keys[999]
        keys += [put("000100x"), put("001200x")]  # one behind the running scan, one ahead of it
        time.sleep(8)  # the scan's later pages come well after the key behind it landed
        for _ in range(6):
            daemon.tick()
        registered = daemon.instance.get_dynamic_partitions(batches.name)
        listed = Counter(k for b in registered for k in (o.key for o in read_manifest(s3, layout.bucket, b).objects))
    assert sorted(listed) == sorted(keys), sorted(set(keys) - set(listed))
    assert all(n == 1 for n in listed.values()), [k for k, n in listed.items() if n > 1]


def test_keys_interleaved_across_source_prefixes_are_each_batched_on_the_next_tick(healthy_stack):
    """On the real S3 server (its Delimiter listing): each source prefix sorts before the one used before it, and
    with no scans after the first tick every key is still in the batch of the tick right after its upload."""
    uid = uuid.uuid4().hex[:8]
    layout = PipelineLayout(raw_prefix=f"rel-{uid}/raw/", intake=IntakeConfig(full_scan_every=0, source_prefix_depth=1))
    res = build_resources(healthy_stack.settings())
    s3 = res["s3"].get_client()
    with dg.instance_for_test() as instance:
        daemon = Daemon(instance, {"s3": res["s3"], "layout": layout})
        for i in range(9):
            key = f"{layout.raw_prefix}{['web', 'code', 'books'][i % 3]}/{i:04d}.txt"
            s3.put_object(Bucket=layout.bucket, Key=key, Body=f"document {key} " * 20)
            before = set(instance.get_dynamic_partitions(batches.name))
            daemon.tick()
            new = set(instance.get_dynamic_partitions(batches.name)) - before
            assert [[o.key for o in read_manifest(s3, layout.bucket, b).objects] for b in new] == [[key]], key
