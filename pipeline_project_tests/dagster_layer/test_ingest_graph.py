"""Sensor and the three ingest assets against the real stack (S3 server, 3 Kafka brokers, MLflow)."""

import json

import dagster as dg
import pytest

from pipeline_project.definitions import defs
from pipeline_project.defs.assets import cleaned, raw, token_blocks
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.assets.token_blocks import token_blocks as token_blocks_asset
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import generate
from pipeline_project.ingest.manifest import read_manifest

pytestmark = pytest.mark.stack


def _tick(instance, resources, cursor):
    sensor_resources = {k: resources[k] for k in ("s3", "layout")}
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=sensor_resources, definitions=defs) as ctx:
        return raw_s3_sensor(ctx)


def _upload(s3, layout, files):
    for f in files:
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)


def test_sensor_batches_new_objects_then_skips_then_batches_more(instance, resources, layout, s3):
    files = generate(seed=1, docs_per_language=5)
    _upload(s3, layout, files[:6])
    first = _tick(instance, resources, None)
    assert len(first.run_requests) == 1
    batch = first.run_requests[0].partition_key
    assert first.run_requests[0].run_key == batch
    assert first.dynamic_partitions_requests[0].partition_keys == [batch]
    manifest = read_manifest(s3, layout.bucket, batch)
    assert sorted(o.key for o in manifest.objects) == sorted(
        layout.raw_prefix + f.key.removeprefix("raw/sample/") for f in files[:6]
    )

    idle = _tick(instance, resources, first.cursor)
    assert idle.run_requests == [] and idle.skip_reason

    # the next objects sort after the ones taken (an append-style layout): the next tick lists only them
    later = [f.__class__(f"raw/sample/zz-later/{f.key.removeprefix('raw/sample/')}", f.data) for f in files[6:9]]
    _upload(s3, layout, later)
    more = _tick(instance, resources, idle.cursor or first.cursor)
    assert len(more.run_requests) == 1 and '"ticks": 2' in more.cursor  # an append listing, not a full one
    second = more.run_requests[0].partition_key
    assert second != batch
    assert len(read_manifest(s3, layout.bucket, second).objects) == 3

    # an object whose key sorts before those taken waits for the next scan, then lands once
    _upload(s3, layout, files[9:10])
    resources = {
        **resources,
        "layout": PipelineLayout(
            **{**layout.model_dump(), "intake": {**layout.intake.model_dump(), "full_scan_every": 1}}
        ),
    }
    full = _tick(instance, resources, more.cursor)
    assert len(full.run_requests) == 1 and '"ticks": 0' in full.cursor
    assert [o.key for o in read_manifest(s3, layout.bucket, full.run_requests[0].partition_key).objects] == [
        layout.raw_prefix + files[9].key.removeprefix("raw/sample/")
    ]


def test_ingest_graph_counts_add_up_and_rematerializing_does_not_duplicate(pg_instance, resources, layout, s3):
    instance = pg_instance  # Dagster storage in PostgreSQL, as the stack and deploy/ configure it
    from pipeline_project.defs.resources.cleaning import CleaningResource

    resources = {**resources, "cleaning": CleaningResource(workers=2, chunk_docs=20, pool_min_mb=0)}  # pool, chunks
    files = generate(seed=2, docs_per_language=6)
    _upload(s3, layout, files)
    tick = _tick(instance, resources, None)
    batch = tick.run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])

    assets = [raw_text, cleaned_shards, token_blocks_asset]
    checks = dg.load_asset_checks_from_modules([raw, cleaned, token_blocks])
    result = dg.materialize([*assets, *checks], resources=resources, partition_key=batch, instance=instance)
    assert result.success
    mats = [e.materialization for e in result.get_asset_materialization_events()]
    meta = {m.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in m.metadata.items()} for m in mats}
    c = meta["cleaned_shards"]
    assert c["filter_workers"] == 2
    d = c["dedup_index"]  # the index's own cost of this batch, in the UI
    assert d["keys_queried"] >= c["kept"] > 0 and d["rows_written"] >= c["kept"]  # every kept document was looked up
    assert c["documents_in"] == c["kept"] + c["dropped"] + c["quarantined"]
    assert c["kept"] > 0 and c["dropped"] > 0 and c["quarantined"] > 0  # the sample has dupes, junk and bad lines
    assert meta["raw_text"]["objects"] > 0 and meta["raw_text"]["missing_or_changed"] == 0
    k = meta["token_blocks"]
    assert (
        k["blocks"] > 0 and k["tokens"] + k["pad_tokens"] == k["blocks"] * layout.topic.seq_len
    )  # padded tail: no token lost
    domains = [key for key in k if key.startswith("blocks_")]
    assert len(domains) == 4, domains  # en_web, zh_web, code, books: packed apart, a padded tail block each at most
    assert 0 <= k["pad_tokens"] < layout.topic.seq_len * len(domains)
    assert k["reused_existing"] is False
    assert len(k["offset_ranges"]) > 1, "a batch spreads over several Kafka partitions"
    evaluations = result.get_asset_check_evaluations()
    assert evaluations and all(e.passed for e in evaluations), [(e.check_name, e.metadata) for e in evaluations]

    excluded = s3.get_object(Bucket=layout.bucket, Key=c["exclusions"].replace(f"s3://{layout.bucket}/", ""))
    assert excluded["ContentLength"] > 0

    again = dg.materialize([token_blocks_asset], resources=resources, partition_key=batch, instance=instance)
    k2 = {
        k_: getattr(v, "value", v)
        for k_, v in again.get_asset_materialization_events()[0].materialization.metadata.items()
    }
    assert k2["reused_existing"] is True
    assert k2["offset_ranges"] == k["offset_ranges"]
    assert json.dumps(k2["offset_ranges"], sort_keys=True) == json.dumps(k["offset_ranges"], sort_keys=True)
