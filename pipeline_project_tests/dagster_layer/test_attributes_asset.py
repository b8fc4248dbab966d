"""`cleaned_shards` writes the attribute file beside the shards and names it, with its sha256, in the manifest."""

import hashlib
from collections import Counter

from pipeline_project.cleaning.output.attributes import read_attributes
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.demo.sample.corpus import generate
from pipeline_project_tests.dagster_layer.test_fast_assets import _materialize, _new_batch, _upload, res  # noqa: F401


def test_every_document_has_an_attribute_row_named_by_the_manifest(instance, res, layout):  # noqa: F811
    from pipeline_project.cleaning import read_shard_manifest

    _upload(res, layout, generate(seed=7, docs_per_language=4))
    batch, _ = _new_batch(instance, res)
    _materialize(instance, res, batch, selection=[raw_text, cleaned_shards])
    client = res["s3"].get_client()
    manifest = read_shard_manifest(client, layout.bucket, layout.shard_dir(batch))
    assert manifest.attributes.startswith(layout.shard_dir(batch))
    data = client.get_object(Bucket=layout.bucket, Key=manifest.attributes)["Body"].read()
    assert hashlib.sha256(data).hexdigest() == manifest.attributes_sha256
    table, config = read_attributes(data)
    rows = table.to_pylist()
    decisions = Counter(r["decision"] for r in rows)
    assert len(rows) == manifest.counts["in"]
    assert {k: decisions[k] for k in ("kept", "dropped", "quarantined")} == {
        k: manifest.counts[k] for k in ("kept", "dropped", "quarantined")
    }
    assert config.config_hash() == manifest.config_hash
    assert all(r["reason"] for r in rows if r["decision"] != "kept")
    web = [r for r in rows if r["decision"] == "kept" and r["domain"] == "en_web"]
    assert web and all(r["gopher_quality.content_words"] and r["language_id.score"] for r in web)
    assert all(r["copies_exact"] is not None for r in rows if r["decision"] == "kept")
