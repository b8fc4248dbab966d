"""The ingest assets, their checks and the sensor on in-process stand-ins: seconds, no services.

The same assets run against the real stack in test_ingest_graph.py; these catch asset-logic regressions fast.
"""

import dagster as dg
import pytest

from pipeline_project.definitions import defs
from pipeline_project.defs.assets import cleaned, raw, token_blocks
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.assets.token_blocks import token_blocks as token_blocks_asset
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import generate
from pipeline_project_tests.dagster_layer.standins import MLFLOW_RUNS, standin_resources

INGEST = [raw_text, cleaned_shards, token_blocks_asset]


@pytest.fixture
def res(uid, layout):
    return standin_resources(uid, layout)


def _upload(res, layout, files):
    client = res["s3"].get_client()
    for f in files:
        client.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)


def _new_batch(instance, res, cursor=None):
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={k: res[k] for k in ("s3", "layout")}, definitions=defs
    ) as ctx:
        tick = raw_s3_sensor(ctx)
    assert len(tick.run_requests) == 1, tick.skip_reason
    batch = tick.run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    return batch, tick.cursor


def _materialize(instance, res, batch, selection=INGEST):
    checks = dg.load_asset_checks_from_modules([raw, cleaned, token_blocks])
    result = dg.materialize([*selection, *checks], resources=res, partition_key=batch, instance=instance,
                            raise_on_error=False)  # fmt: skip
    meta = {
        e.materialization.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
    }  # fmt: skip
    checks_passed = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    return result, meta, checks_passed


def test_ingest_graph_accounts_for_every_document_and_every_check_passes(instance, res, layout):
    _upload(res, layout, generate(seed=3, docs_per_language=6))
    batch, _ = _new_batch(instance, res)
    result, meta, checks = _materialize(instance, res, batch)
    assert result.success
    c = meta["cleaned_shards"]
    assert c["documents_in"] == c["kept"] + c["dropped"] + c["quarantined"]
    assert c["kept"] > 0 and c["dropped"] > 0 and c["quarantined"] > 0
    assert meta["raw_text"]["objects"] > 0 and meta["raw_text"]["missing_or_changed"] == 0
    assert sum(c["dropped_by_reason"].values()) == c["dropped"] + c["quarantined"]
    t = meta["token_blocks"]
    assert t["blocks"] > 0 and t["reused_existing"] is False
    # packed per domain: one partial tail block per domain at most, and the per-domain counts add up
    domains = t["domains"]
    assert len(domains) >= 2, domains
    assert t["tokens"] + t["pad_tokens"] == t["blocks"] * layout.topic.seq_len
    assert 0 < t["tail_tokens"] < layout.topic.seq_len * len(domains)
    assert sum(d["blocks"] for d in domains.values()) == t["blocks"]
    assert sum(d["tokens"] for d in domains.values()) == t["tokens"]
    assert all(t[f"tokens_{d}"] == c["tokens"] for d, c in domains.items())
    assert res["kafka"].blocks(layout.topic.name) and all(
        src == batch for src, _ in res["kafka"].blocks(layout.topic.name)
    )
    assert checks and all(checks.values()), checks
    assert MLFLOW_RUNS[-1]["tags"]["batch"] == batch


def test_rematerializing_token_blocks_reuses_the_ledger_entry(instance, res, layout):
    _upload(res, layout, generate(seed=4, docs_per_language=4))
    batch, _ = _new_batch(instance, res)
    _, first, _ = _materialize(instance, res, batch)
    blocks_before = len(res["kafka"].blocks(layout.topic.name))
    _, again, checks = _materialize(instance, res, batch, selection=[token_blocks_asset])
    assert again["token_blocks"]["reused_existing"] is True
    assert again["token_blocks"]["offset_ranges"] == first["token_blocks"]["offset_ranges"]
    assert len(res["kafka"].blocks(layout.topic.name)) == blocks_before
    assert checks["topic_holds_claimed_blocks"] is True


def test_a_corrupted_shard_is_found_by_the_readable_check(instance, res, layout):
    from pipeline_project.cleaning import read_shard_manifest, verify_published

    _upload(res, layout, generate(seed=5, docs_per_language=4))
    batch, _ = _new_batch(instance, res)
    _, meta, checks = _materialize(instance, res, batch, selection=[raw_text, cleaned_shards])
    assert checks["cleaned_shards_readable"] is True
    client = res["s3"].get_client()
    manifest = read_shard_manifest(client, layout.bucket, layout.shard_dir(batch))
    assert verify_published(client, layout.bucket, manifest) == []
    client.put_object(Bucket=layout.bucket, Key=meta["cleaned_shards"]["shard_keys"][0], Body=b"not zstd")
    assert verify_published(client, layout.bucket, manifest) == [f"{manifest.shards[0].key}: sha256 differs"]


def test_a_batch_of_only_bad_input_is_accounted_for_and_produces_nothing(instance, res, layout):
    client = res["s3"].get_client()
    for name, body in {"a.jsonl": b"{not json\n[1, 2]\n", "b.txt": b"\x00\x01binary", "c.bin": b"??"}.items():
        client.put_object(Bucket=layout.bucket, Key=f"{layout.raw_prefix}{name}", Body=body)
    batch, _ = _new_batch(instance, res)
    result, meta, checks = _materialize(instance, res, batch)
    assert result.success, checks
    c = meta["cleaned_shards"]
    assert (c["documents_in"], c["kept"], c["quarantined"]) == (4, 0, 4)
    assert meta["token_blocks"]["blocks"] == 0
    assert all(checks.values()), checks


def test_token_blocks_metadata_counts_fim_and_decontaminated_documents(instance, uid, layout, tmp_path):
    """FIM on for code and HumanEval decontamination on: the counts reach the token_blocks metadata."""
    import gzip
    import json
    import random

    from pipeline_project.cleaning.decontam.index import HUMANEVAL, resolve_path
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.demo.sample.domains import code_file

    layout = PipelineLayout(
        **{**layout.model_dump(), "topic": {**layout.topic.model_dump(), "fim_code_rate": 0.5, "fim_seed": 1}}
    )
    config = tmp_path / "cleaning.json"
    config.write_text(json.dumps({"decontamination": {"enabled": True}}))
    res = {**standin_resources(uid, layout), "cleaning": CleaningResource(workers=1, config_path=str(config))}
    with gzip.open(resolve_path(HUMANEVAL.path), "rt") as f:
        problems = [json.loads(line) for line in f][:2]
    rng = random.Random(5)
    code = [code_file(rng, i) for i in range(12)]
    lines = [{"text": src, "path": path} for path, src in code]
    lines += [
        {"text": p["prompt"] + p["canonical_solution"], "path": f"src/copied_{i}.py"} for i, p in enumerate(problems)
    ]
    client = res["s3"].get_client()
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    client.put_object(Bucket=layout.bucket, Key=f"{layout.raw_prefix}code/modules.jsonl", Body=body)
    batch, _ = _new_batch(instance, res)
    result, meta, _ = _materialize(instance, res, batch)
    assert result.success
    t = meta["token_blocks"]
    assert t["decontaminated"] == 2 and t["decontaminated_humaneval"] == 2
    assert t["fim_docs"] == t["fim_docs_code"] == t["domains"]["code"]["fim_docs"]
    assert 0 < t["fim_docs"] < t["domains"]["code"]["docs"]
