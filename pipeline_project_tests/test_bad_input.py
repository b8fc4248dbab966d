"""Bad input at scale (`demo/bad_input.py`), on the small scale: every class gets its one reason, counts add up.

The readers run over every generated file and must give exactly what `expected.json` says; then the Dagster ingest
graph runs on the same files with in-process stand-ins (seconds, no services): the whole set, a batch whose every
document is bad, and a batch whose objects vanish or change between the sensor tick and the run.
"""

from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
import zstandard

from pipeline_project.cleaning import CleaningConfig, Quarantined, read_object
from pipeline_project.cleaning.config import ReaderConfig
from pipeline_project.cleaning.read.readers import REASONS
from pipeline_project.defs.resources.layout import TopicConfig
from pipeline_project.demo.bad_input.write import CLASSES, EXPECTED_NAME, KEPT, SCALES, write_bad_input

SCALE = "small"


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    write_bad_input(root, SCALE)
    return root


@pytest.fixture(scope="module")
def expected(bad_dir) -> dict:
    return json.loads((bad_dir / EXPECTED_NAME).read_text())


def _reader_config(expected: dict) -> CleaningConfig:
    return CleaningConfig(reader=ReaderConfig(**expected["reader"]))


def _outcome(items) -> tuple[int, dict[str, int]]:
    items = list(items)
    kept = sum(not isinstance(i, Quarantined) for i in items)
    return kept, dict(Counter(i.reason for i in items if isinstance(i, Quarantined)))


def test_at_least_25_classes_each_with_one_outcome(expected):
    assert len(CLASSES) >= 25 and len({c.name for c in CLASSES}) == len(CLASSES)
    quarantining = [c for c in CLASSES if c.outcome != KEPT]
    assert len(quarantining) >= 20
    for c in CLASSES:
        assert c.outcome == KEPT or c.outcome in REASONS, c
    by_class: dict[str, list[dict]] = {}
    for entry in expected["files"].values():
        by_class.setdefault(entry["class"], []).append(entry)
    for name, cls in expected["classes"].items():
        files = by_class[name]
        for f in files:
            if cls["outcome"] == KEPT:
                assert f["kept"] > 0 and not f["quarantined"], (name, f)
            else:  # the class's reason is the only one; good lines beside it are kept
                assert list(f["quarantined"]) == [cls["outcome"]], (name, f)


def test_the_readers_give_every_file_exactly_its_expected_outcome(bad_dir, expected):
    config = _reader_config(expected)
    on_disk = sorted(p.relative_to(bad_dir).as_posix() for p in bad_dir.rglob("*") if p.is_file())
    assert on_disk == sorted(expected["files"])
    totals: Counter = Counter()
    kept_total = 0
    for rel, want in expected["files"].items():
        kept, quarantined = _outcome(read_object(f"raw/demo/{rel}", (bad_dir / rel).read_bytes(), config))
        assert (kept, quarantined) == (want["kept"], want["quarantined"]), rel
        kept_total += kept
        totals.update(quarantined)
    t = expected["totals"]
    assert kept_total == t["kept"] and dict(totals) == t["quarantined"]
    assert t["records"] == t["kept"] + sum(t["quarantined"].values())
    assert {c.outcome for c in CLASSES} - {KEPT} <= set(totals)


def test_full_scale_is_what_the_issue_asks_for_and_small_keeps_each_class_over_its_cap():
    default = ReaderConfig()
    full, small = SCALES["full"], SCALES["small"]
    assert full.reader == {} and full.long_line_bytes >= 200_000_000 and full.tiny_docs >= 1_000_000
    assert full.big_txt_bytes > default.max_document_bytes and full.long_line_bytes > default.max_line_bytes
    assert full.bomb_bytes > 4 * default.max_decompressed_bytes
    cfg = ReaderConfig(**small.reader)
    assert small.long_line_bytes > cfg.max_line_bytes and small.big_txt_bytes > cfg.max_document_bytes
    assert small.bomb_bytes > 4 * cfg.max_decompressed_bytes and small.long_line_bytes < cfg.max_decompressed_bytes


def test_the_generator_refuses_paths_that_leave_its_directory(tmp_path, monkeypatch):
    from pipeline_project.common.s3 import UnsafeKeyError
    from pipeline_project.demo.bad_input import write as bad_input

    evil = bad_input.BadClass("evil", KEPT, "x", lambda rng, s: [bad_input.BadFile("../escape.txt", [b"x"], 1)])
    monkeypatch.setattr(bad_input, "CLASSES", [evil])
    with pytest.raises(UnsafeKeyError):
        bad_input.write_bad_input(tmp_path / "out", SCALE)
    assert not (tmp_path / "escape.txt").exists()


# ---- the Dagster ingest graph on stand-ins --------------------------------------------------------------


@pytest.fixture
def graph(tmp_path, expected):
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project_tests.dagster_layer.standins import standin_resources

    uid = uuid.uuid4().hex[:8]
    layout = PipelineLayout(
        raw_prefix=f"bad-{uid}/raw/",
        shards_prefix=f"bad-{uid}/shards/",
        exclusions_prefix=f"bad-{uid}/exclusions/",
        topic=TopicConfig(name=f"bad-{uid}-blocks", seq_len=64, message_bytes=16 * 1024),
    )
    config_path = tmp_path / "cleaning.json"
    config_path.write_text(json.dumps({"reader": expected["reader"]}))
    res = standin_resources(uid, layout)
    res["cleaning"] = CleaningResource(config_path=str(config_path))
    with dg.instance_for_test() as instance:
        yield instance, res, layout


def _upload(res, layout, files: dict[str, bytes]) -> None:
    client = res["s3"].get_client()
    for rel, body in files.items():
        client.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + rel, Body=body)


def _sensor_batch(instance, res) -> str:
    from pipeline_project.definitions import defs
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor

    with dg.build_sensor_context(
        instance=instance, resources={k: res[k] for k in ("s3", "layout")}, definitions=defs
    ) as ctx:
        tick = raw_s3_sensor(ctx)
    assert len(tick.run_requests) == 1, tick.skip_reason
    batch = tick.run_requests[0].partition_key
    instance.add_dynamic_partitions("batches", [batch])
    return batch


def _materialize(instance, res, batch):
    from pipeline_project.defs.assets import cleaned, raw, token_blocks
    from pipeline_project.defs.assets.cleaned import cleaned_shards
    from pipeline_project.defs.assets.raw import raw_text
    from pipeline_project.defs.assets.token_blocks import token_blocks as token_blocks_asset

    checks = dg.load_asset_checks_from_modules([raw, cleaned, token_blocks])
    result = dg.materialize(
        [raw_text, cleaned_shards, token_blocks_asset, *checks],
        resources=res,
        partition_key=batch,
        instance=instance,
        raise_on_error=False,
    )
    meta = {
        e.materialization.asset_key.to_user_string(): {
            k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()
        }
        for e in result.get_asset_materialization_events()
    }
    return result, meta, {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def _files(bad_dir: Path, expected: dict, keep=lambda entry: True) -> dict[str, bytes]:
    return {rel: (bad_dir / rel).read_bytes() for rel, e in expected["files"].items() if keep(e)}


def _exclusions(res, layout, meta) -> list[dict]:
    key = meta["cleaned_shards"]["exclusions"].removeprefix(f"s3://{layout.bucket}/")
    data = res["s3"].get_client().get_object(Bucket=layout.bucket, Key=key)["Body"].read()
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        return [json.loads(line) for line in reader.read().decode().splitlines()]


def test_the_ingest_graph_accounts_for_every_record_of_the_bad_input(graph, bad_dir, expected):
    instance, res, layout = graph
    _upload(res, layout, _files(bad_dir, expected))
    batch = _sensor_batch(instance, res)
    result, meta, checks = _materialize(instance, res, batch)
    assert result.success
    t, raw, c = expected["totals"], meta["raw_text"], meta["cleaned_shards"]
    assert raw["objects"] == t["objects"]
    quarantined = {
        k.removeprefix("quarantine:"): v for k, v in c["dropped_by_reason"].items() if k.startswith("quarantine:")
    }
    assert c["documents_in"] - c["quarantined"] == t["kept"] and quarantined == t["quarantined"]
    assert c["documents_in"] == t["records"] == c["kept"] + c["dropped"] + c["quarantined"]
    assert c["quarantined"] == sum(t["quarantined"].values())
    assert sum(c["dropped_by_reason"].values()) == c["dropped"] + c["quarantined"]
    assert len(_exclusions(res, layout, meta)) == c["dropped"] + c["quarantined"]
    assert checks["cleaned_counts_add_up"] and checks["cleaned_shards_readable"], checks
    assert c["kept"] > 0 and meta["token_blocks"]["blocks"] > 0, "the valid-but-odd documents reach Kafka"


def test_a_batch_whose_every_document_is_bad_succeeds_with_nothing_kept(graph, bad_dir, expected):
    """Stated behaviour: the run succeeds; every record is in the exclusion sink with its reason; no shard is
    written, no block is produced, and every check passes (an empty batch is a valid batch)."""
    instance, res, layout = graph
    files = _files(bad_dir, expected, keep=lambda e: e["kept"] == 0)
    assert len(files) >= 25
    _upload(res, layout, files)
    batch = _sensor_batch(instance, res)
    result, meta, checks = _materialize(instance, res, batch)
    assert result.success
    c = meta["cleaned_shards"]
    want = sum(sum(expected["files"][rel]["quarantined"].values()) for rel in files)
    assert (c["documents_in"], c["kept"], c["quarantined"]) == (want, 0, want)
    assert c["shard_keys"] == [] and meta["token_blocks"]["blocks"] == 0
    assert Counter(r["reason"] for r in _exclusions(res, layout, meta)) == sum(
        (Counter(expected["files"][rel]["quarantined"]) for rel in files), Counter()
    )
    assert checks and all(checks.values()), checks


def test_objects_that_vanish_or_change_after_the_sensor_tick_are_quarantined_and_the_batch_finishes(graph):
    instance, res, layout = graph
    good = "".join(json.dumps({"text": f"line {i} of a document"}) + "\n" for i in range(3)).encode()
    _upload(res, layout, {"a.jsonl": good, "gone.jsonl": good, "changed.txt": b"before", "z.jsonl": good})
    batch = _sensor_batch(instance, res)
    store = res["s3"].get_client()
    del store.objects[(layout.bucket, layout.raw_prefix + "gone.jsonl")]
    store.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + "changed.txt", Body=b"after")
    result, meta, checks = _materialize(instance, res, batch)
    assert result.success
    raw = meta["raw_text"]
    assert raw["missing_or_changed"] == 2  # raw_text sees it (HEAD); cleaned_shards quarantines them
    c = meta["cleaned_shards"]
    assert c["documents_in"] == 8 and c["quarantined"] == 2
    excluded = {r["id"]: r["reason"] for r in _exclusions(res, layout, meta) if r["kind"] == "quarantined"}
    assert excluded == {
        layout.raw_prefix + "gone.jsonl": "object_missing",
        layout.raw_prefix + "changed.txt": "object_changed",
    }
    assert checks["raw_objects_unchanged"] is False  # the non-blocking check reports what happened
    assert checks["cleaned_counts_add_up"] is True


# ---- the CLI and the demo's upload of a directory -------------------------------------------------------


def test_the_cli_writes_the_small_scale_and_refuses_a_non_empty_directory(tmp_path):
    from typer.testing import CliRunner

    from pipeline_project.cli.app import app

    out = tmp_path / "bad"
    result = CliRunner().invoke(app, ["bad-input", str(out), "--scale", "small"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / EXPECTED_NAME).read_text())["scale"] == "small"
    again = CliRunner().invoke(app, ["bad-input", str(out)])
    assert again.exit_code == 1 and "not an empty directory" in again.output


def test_the_demo_uploads_every_generated_file_under_its_own_key(bad_dir, expected, tmp_path):
    from pipeline_project.demo.runner import files_from_dir

    files = files_from_dir(bad_dir, "raw/demo-x/")
    assert sorted(f.key.removeprefix("raw/demo-x/") for f in files) == sorted(expected["files"])
    outside = tmp_path / "secret.txt"
    outside.write_text("not for upload")
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text("fine")
    (src / "link.txt").symlink_to(outside)
    with pytest.raises(SystemExit, match="outside the directory"):
        files_from_dir(src, "raw/")
