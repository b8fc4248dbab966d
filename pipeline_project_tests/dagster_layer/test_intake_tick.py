"""One sensor tick on the real stack's S3 server registers every new object, in as many batches as they fill
(issue 38 section 2): before it, a tick made one batch, and a backlog waited one tick (15 s) per batch."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import pytest

from pipeline_project.definitions import defs
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources.layout import IntakeConfig, PipelineLayout
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.ingest.manifest import read_manifest

pytestmark = pytest.mark.stack

PER_BATCH = 20


def _tick(instance, resources, cursor):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources, definitions=defs) as ctx:
        return raw_s3_sensor(ctx)


def test_one_tick_registers_a_backlog_of_several_batches_and_the_next_takes_nothing(instance, resources, layout, s3):
    layout = PipelineLayout(**{**layout.model_dump(), "intake": IntakeConfig(max_objects_per_batch=PER_BATCH)})
    sensor_resources = {"s3": resources["s3"], "layout": layout}
    # 3.5 batches' worth, under two source prefixes
    keys = [f"{layout.raw_prefix}a/{i:05d}.jsonl" for i in range(PER_BATCH * 3)]
    keys += [f"{layout.raw_prefix}b/{i:05d}.jsonl" for i in range(PER_BATCH // 2)]

    def put(key: str) -> None:
        s3.put_object(Bucket=layout.bucket, Key=key, Body=f'{{"text": "document {key}"}}\n'.encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, keys))

    first = _tick(instance, sensor_resources, None)
    ids = [r.run_key for r in first.run_requests]
    assert len(ids) == 4, f"{len(keys)} objects at {PER_BATCH} a batch: 4 batches in one tick, got {len(ids)}"
    assert [r.partition_key for r in first.run_requests] == ids and len(set(ids)) == 4
    assert all(r.tags["pipeline/batch"] == r.run_key for r in first.run_requests)
    (request,) = first.dynamic_partitions_requests
    assert request.partitions_def_name == batches.name and list(request.partition_keys) == ids
    listed = Counter(o.key for b in ids for o in read_manifest(s3, layout.bucket, b).objects)
    assert sorted(listed) == sorted(keys), "every new object is in a batch of this tick"
    assert set(listed.values()) == {1}, "and in one only"
    assert all(len(read_manifest(s3, layout.bucket, b).objects) <= PER_BATCH for b in ids)

    instance.add_dynamic_partitions(batches.name, ids)  # what the daemon does with the result
    idle = _tick(instance, sensor_resources, first.cursor)
    assert idle.run_requests == [] and idle.skip_reason
