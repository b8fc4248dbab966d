"""An object overwritten after the sensor took it is input again, once (issue 27): on the real S3 server and Kafka,
the sensor evaluated with `build_sensor_context` over a Dagster instance, each batch materialized to the topic."""

import random

import dagster as dg
import numpy as np
import pytest

from pipeline_project.definitions import defs
from pipeline_project.defs.assets import cleaned, raw, token_blocks
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.assets.token_blocks import token_blocks as token_blocks_asset
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import prose_document
from pipeline_project.ingest.manifest import read_manifest
from pipeline_project.streaming.kafka.format import PAD_TOKEN, decode_message
from pipeline_project.streaming.tokenizer import load_tokenizer
from pipeline_project_tests.streaming.kafka_helpers import consume_all, kafka_settings

pytestmark = pytest.mark.stack


def _tick(instance, resources, cursor):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources, definitions=defs) as ctx:
        result = raw_s3_sensor(ctx)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def _topic_texts(stack, topic: str) -> list[str]:
    """Each committed message of the topic decoded to text (a short document fits in one message)."""
    tok = load_tokenizer()
    texts = []
    for m in consume_all(kafka_settings(stack), topic):
        blocks = decode_message(m.value(), m.headers(), topic=topic, partition=m.partition(), offset=m.offset())
        ids = np.asarray(blocks).ravel()
        texts.append(tok.decode(ids[ids != PAD_TOKEN]))
    return texts


def test_an_object_overwritten_after_its_batch_is_ingested_again_once(instance, resources, layout, s3, stack):
    layout = PipelineLayout(**{**layout.model_dump(), "intake": {**layout.intake.model_dump(), "full_scan_every": 1}})
    resources = {**resources, "layout": layout}
    sensor_res = {k: resources[k] for k in ("s3", "layout")}
    uid = layout.topic.name.split("-")[1]
    # A fixed seed: the uid (a new seed each run) gave about 1 run in 11 a document that the quality filters drop
    # (e.g. uid eb34d514: the second version, for `duplicated_5_n_grams`), and its marker never reached the topic.
    rng = random.Random(0)
    v1, v2, other = (f"Marker{uid}{name}. " + prose_document(rng, "en", 2) for name in ("first", "second", "other"))
    key = f"{layout.raw_prefix}notes.txt"
    s3.put_object(Bucket=layout.bucket, Key=key, Body=v1.encode())
    s3.put_object(Bucket=layout.bucket, Key=f"{layout.raw_prefix}other.txt", Body=other.encode())
    assets = [
        raw_text,
        cleaned_shards,
        token_blocks_asset,
        *dg.load_asset_checks_from_modules([raw, cleaned, token_blocks]),
    ]

    def ingest(batch: str) -> int:
        result = dg.materialize(assets, resources=resources, partition_key=batch, instance=instance)
        assert result.success
        return result.asset_materializations_for_node("cleaned_shards")[0].metadata["kept"].value

    first = _tick(instance, sensor_res, None)
    assert ingest(first.run_requests[0].partition_key) == 2, "the test's own documents pass the filters"
    s3.put_object(Bucket=layout.bucket, Key=key, Body=v2.encode())  # a new version, seconds later
    cursor, new = first.cursor, []
    for _ in range(4):
        tick = _tick(instance, sensor_res, cursor)
        cursor, new = tick.cursor, new + [r.partition_key for r in tick.run_requests]
    assert len(new) == 1, f"the new version is input once, not {len(new)} times"
    etag = s3.head_object(Bucket=layout.bucket, Key=key)["ETag"].strip('"')
    assert [(o.key, o.etag) for o in read_manifest(s3, layout.bucket, new[0]).objects] == [(key, etag)]
    assert ingest(new[0]) == 1
    assert len(instance.get_dynamic_partitions(batches.name)) == 2

    texts = _topic_texts(stack, layout.topic.name)
    for marker in (f"Marker{uid}first", f"Marker{uid}second", f"Marker{uid}other"):
        assert sum(t.count(marker) for t in texts) == 1, marker
