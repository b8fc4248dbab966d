"""The formats corpora come in, through the real pipeline's cleaning on the real stack (issue 38): a FineWeb-style
Parquet file, a WET file, a WARC file of HTML responses and a folder of source files are uploaded to S3, the
sensor makes their batch, `raw_text` and `cleaned_shards` run, and each kept document is in its profile."""

import gzip
import json
import random

import dagster as dg
import pytest

from pipeline_project.cleaning import read_shard
from pipeline_project.cleaning.output.publish import read_shard_manifest
from pipeline_project.definitions import defs
from pipeline_project.defs.assets import cleaned
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.resources.cleaning import CleaningResource
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project_harness.format_samples import SOURCES, fineweb_parquet, html_page, warc_bytes
from pipeline_project_tests.cleaning.conftest import prose

pytestmark = pytest.mark.stack


def test_parquet_wet_warc_and_source_files_are_cleaned_into_their_profiles(instance, resources, layout, s3, tmp_path):
    rng = random.Random(38)
    seeds = iter(rng.sample(range(10_000), 9))
    web = [prose(12, seed=next(seeds)) for _ in range(9)]
    wet = [("conversion", f"https://wet.example/{i}", t.encode(), "text/plain", None) for i, t in enumerate(web[3:6])]
    warc = [
        ("response", f"https://warc.example/{i}", html_page(f"Page {i}", t), "text/html", "200 OK")
        for i, t in enumerate(web[6:])
    ]
    files = {
        "fineweb/000.parquet": fineweb_parquet(web[:3]),
        "crawl/CC-MAIN-0.warc.wet.gz": gzip.compress(warc_bytes(wet)),
        "crawl/CC-MAIN-0.warc.gz": warc_bytes(warc, gzip=True),
        **{f"repos/demo/{path}": code.encode() for path, code in SOURCES.items()},
    }
    for rel, body in files.items():
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + rel, Body=body)
    config = tmp_path / "cleaning.json"
    config.write_text(json.dumps({"reader": {"extract_html": True}}))
    res = {**resources, "cleaning": CleaningResource(workers=1, config_path=str(config))}

    with dg.build_sensor_context(
        instance=instance, resources={k: res[k] for k in ("s3", "layout")}, definitions=defs
    ) as ctx:
        batch = raw_s3_sensor(ctx).run_requests[0].partition_key
    instance.add_dynamic_partitions("batches", [batch])
    checks = dg.load_asset_checks_from_modules([cleaned])
    result = dg.materialize([raw_text, cleaned_shards, *checks], resources=res, partition_key=batch, instance=instance)
    assert result.success
    meta = {
        e.materialization.asset_key.to_user_string(): {
            k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()
        }
        for e in result.get_asset_materialization_events()
    }
    c = meta["cleaned_shards"]
    # records in: 3 rows, 3 conversions + 1 warcinfo, 3 responses + 1 warcinfo, 5 source files
    assert c["documents_in"] == 16 == c["kept"] + c["dropped"] + c["quarantined"]
    assert c["quarantined"] == 2 and c["dropped_by_reason"] == {"quarantine:warc_non_document": 2}
    assert all(e.passed for e in result.get_asset_check_evaluations())

    manifest = read_shard_manifest(s3, layout.bucket, layout.shard_dir(batch))
    kept = [
        rec
        for entry in manifest.shards
        for rec in read_shard(s3.get_object(Bucket=layout.bucket, Key=entry.key)["Body"].read())
    ]
    by_object: dict[str, set[str]] = {}
    for rec in kept:
        by_object.setdefault(rec["source"].removeprefix(layout.raw_prefix).split("/")[0], set()).add(rec["domain"])
    assert by_object == {"fineweb": {"en_web"}, "crawl": {"en_web"}, "repos": {"code"}}
    assert len(kept) == 14
    code = {
        rec["meta"]["fields"]["path"].removeprefix(layout.raw_prefix): rec["meta"]["lang"]
        for rec in kept
        if rec["domain"] == "code"
    }
    assert code == {f"repos/demo/{p}": lang for p, lang in zip(SOURCES, ["python", "go", "rust", "javascript", "ruby"])}
    urls = {rec["meta"]["fields"].get("url") for rec in kept if rec["source"].endswith((".gz", ".parquet"))}
    assert {f"https://wet.example/{i}" for i in range(3)} | {f"https://warc.example/{i}" for i in range(3)} <= urls
    assert all(
        rec["meta"]["fields"]["warc_record_id"].startswith("<urn:uuid:") for rec in kept if "crawl" in rec["source"]
    )
