"""The training-content summary (`provenance.content_summary`): the builder over hand-made records (the counts add up per
source and per batch; what the pipeline cannot know is left to the provider), the attribution of trained messages
to batches, and on the real stack: clean and produce a batch, train a tiny checkpoint, materialize the summary."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipeline_project.ingest.manifest import RawObject
from pipeline_project.provenance.content_summary import (
    TBC,
    BatchInput,
    DocKey,
    Provider,
    SummaryInputs,
    adds_up,
    build_summary,
    render_markdown,
)
from pipeline_project.provenance.content_summary.build import source_prefix
from pipeline_project.provenance.content_summary.model import RetractionInput, reason_head
from pipeline_project.provenance.content_summary.trained import Trained, add_step_log, attribute, trained_retracted
from pipeline_project.streaming.retractions.model import BlockRange


def _obj(key: str, size: int, day: int) -> RawObject:
    return RawObject(key=key, etag="e", size=size, last_modified=f"2026-12-{day:02d}T00:00:00+00:00")


def _tally(*rows: tuple[str, str, str, str, str, str, int]) -> Counter[DocKey]:
    return Counter({DocKey(*r[:6]): r[6] for r in rows})


def _batches() -> list[BatchInput]:
    one = BatchInput(
        "b1",
        objects=(_obj("raw/web/a.jsonl", 1000, 1), _obj("raw/web/en/b.jsonl", 500, 3), _obj("raw/code/x.py", 80, 2)),
        counts={"in": 14, "kept": 8, "dropped": 5, "quarantined": 1},
        config_hash="h1",
        tally=_tally(
            ("raw/web/a.jsonl", "en_web", "en", "kept", "", "", 5),
            ("raw/web/en/b.jsonl", "en_web", "de", "kept", "", "", 2),
            ("raw/web/a.jsonl", "en_web", "en", "dropped", "exact_dedup", "exact_duplicate_of", 2),
            ("raw/web/a.jsonl", "en_web", "en", "dropped", "gopher_quality", "gopher_short_doc", 1),
            ("raw/web/en/b.jsonl", "en_web", "en", "dropped", "minhash_dedup", "near_duplicate_of", 1),
            ("raw/code/x.py", "code", "", "kept", "", "", 1),
            ("raw/code/x.py", "code", "", "dropped", "decontaminate", "decontaminated:humaneval", 1),
            ("raw/web/en/b.jsonl", "", "", "quarantined", "read", "invalid_json", 1),
        ),
        produced={"blocks": 10, "tokens": 600, "domains": {"en_web": {"tokens": 500, "blocks": 8, "docs": 7},
                                                            "code": {"tokens": 100, "blocks": 2, "docs": 1,
                                                                     "fim_docs": 1}}},
        trained_blocks=10,
    )  # fmt: skip
    two = BatchInput(
        "b2",
        objects=(_obj("raw/web/c.txt", 300, 9),),
        counts={"in": 3, "kept": 2, "dropped": 1, "quarantined": 0},
        config_hash="h1",
        tally=_tally(
            ("raw/web/c.txt", "en_web", "en", "kept", "", "", 2),
            ("raw/web/c.txt", "en_web", "en", "dropped", "takedown_blocklist", "blocked:req-7", 1),
        ),
        produced={"blocks": 4, "tokens": 250, "domains": {"en_web": {"tokens": 250, "blocks": 4, "docs": 2}}},
        trained_blocks=3,
    )
    return [one, two]


def _inputs(**over) -> SummaryInputs:
    base = dict(
        lineage="main", checkpoint_step=12, checkpoint_uri="s3://p/checkpoints/main/step-12-ab/",
        checkpoint_created_at="2026-12-10T00:00:00+00:00", topic="token-blocks", seq_len=64, batches=_batches(),
        configs={"h1": {"gopher_quality": {"min_doc_words": 50}, "dedup": {"scope": "global"}}},
        retractions=[RetractionInput("takedown:req-7", "takedown:req-7", blocks=2, passed_over=1, trained_before=1),
                     RetractionInput("retire:b0:abc", "bad batch", blocks=0, whole_messages=3, passed_over=5)],
    )  # fmt: skip
    base.update(over)
    return SummaryInputs(**base)


def test_the_counts_add_up_per_source_and_per_batch():
    s = build_summary(_inputs(), generated_at="now")
    assert adds_up(s)
    by_prefix = {r["prefix"]: r for r in s["2_data_sources"]["sources"]}
    assert set(by_prefix) == {"raw/web/", "raw/code/"}
    web, code = by_prefix["raw/web/"], by_prefix["raw/code/"]
    assert (web["objects"], web["bytes"]) == (3, 1800)
    assert (web["first_modified"][:10], web["last_modified"][:10]) == ("2026-12-01", "2026-12-09")
    assert web["documents"] == {"in": 15, "kept": 9, "dropped": 5, "quarantined": 1, "balanced": True}
    assert code["documents"] == {"in": 2, "kept": 1, "dropped": 1, "quarantined": 0, "balanced": True}
    for src in (web, code):
        d = src["documents"]
        assert d["in"] == d["kept"] + d["dropped"] + d["quarantined"]
    total = {k: sum(r[k] for r in s["accounting"]) for k in ("in", "kept", "dropped", "quarantined")}
    assert total == {k: web["documents"][k] + code["documents"][k] for k in total}
    size = s["1_general_information"]["size"]
    assert size["raw_objects"] == 4 and size["documents_in"] == 17 and size["documents_kept"] == 10
    assert size["tokens_produced"] == 850 and size["tokens_trained"] == 13 * 64


def test_filters_dedup_decontamination_and_takedowns_are_counted_with_their_thresholds():
    s = build_summary(_inputs())
    proc = s["3_data_processing"]["3.2_illegal_content_and_filtering"]
    assert proc["deduplication"] == {"exact": 2, "near": 1}
    assert proc["decontamination"] == {"humaneval": 1}
    assert proc["quarantined"] == 1
    steps = {f["step"]: f for f in proc["filters"]}
    assert steps["gopher_quality"]["by_reason"] == {"gopher_short_doc": 1}
    assert steps["gopher_quality"]["thresholds"] == {"min_doc_words": 50}
    assert steps["read"]["by_reason"] == {"invalid_json": 1}
    rights = s["3_data_processing"]["3.1_reservation_of_rights"]
    assert rights["takedown_documents_blocked"] == {"blocked:req-7": 1}
    assert rights["takedowns"] == {"requests": 1, "blocks": 2, "whole_messages": 0, "passed_over": 1,
                                   "trained_before": 1}  # fmt: skip
    kinds = proc["retractions"]["by_kind"]
    assert kinds["retire"]["whole_messages"] == 3 and kinds["retire"]["passed_over"] == 5
    langs = {r["language"]: r["kept_documents"] for r in s["1_general_information"]["languages"]}
    assert langs == {"en": 7, "de": 2, "(none)": 1}
    doms = {r["domain"]: r for r in s["1_general_information"]["domains"]}
    assert doms["en_web"]["tokens"] == 750 and doms["code"]["fim_documents"] == 1


def test_what_the_pipeline_cannot_know_is_left_to_the_provider():
    s = build_summary(_inputs())
    gen = s["1_general_information"]
    assert gen["provider"] == gen["model"] == TBC
    assert all(r["category"] == TBC for r in s["2_data_sources"]["sources"])
    assert s["2_data_sources"]["2.3_data_crawled_and_scraped"] == TBC
    assert s["3_data_processing"]["3.1_reservation_of_rights"]["collection_opt_outs"] == TBC
    md = render_markdown(s)
    for heading in ("## 1. General information", "## 2. List of data sources", "### 3.1", "### 3.2"):
        assert heading in md
    assert f"**{TBC}**" in md and "| raw/web/ |" in md

    given = Provider(provider="Acme", model="m-1", source_categories={"raw/web/": "2.3"})
    s = build_summary(_inputs(provider=given))
    assert s["1_general_information"]["provider"] == "Acme"
    assert s["2_data_sources"]["2.3_data_crawled_and_scraped"] == ["raw/web/"]
    assert s["2_data_sources"]["2.1_publicly_available_datasets"] == TBC
    with pytest.raises(ValueError, match="unknown provider fields"):
        Provider.from_dict({"name": "x"})


def test_a_batch_whose_records_disagree_with_its_manifest_does_not_add_up():
    batches = _batches()
    batches[1].counts = {"in": 4, "kept": 2, "dropped": 1, "quarantined": 1}
    s = build_summary(_inputs(batches=batches))
    assert not adds_up(s)
    row = next(r for r in s["accounting"] if r["batch"] == "b2")
    assert row["balanced"] and not row["records_match"]
    batches[1].counts = {"in": 3, "kept": 2, "dropped": 2, "quarantined": 0}
    assert not adds_up(build_summary(_inputs(batches=batches)))


def test_source_prefixes_and_reason_classes():
    assert source_prefix("raw/web/en/a.txt", "raw/", 1) == "raw/web/"
    assert source_prefix("raw/web/en/a.txt", "raw/", 2) == "raw/web/en/"
    assert source_prefix("raw/a.txt", "raw/", 1) == "raw/"
    assert source_prefix("other/x/a.txt", "raw/", 1) == "other/"
    assert reason_head("exact_duplicate_of:b1/doc#3") == "exact_duplicate_of"
    assert reason_head("blocked:req-1") == "blocked:req-1"


def test_trained_messages_go_to_the_batch_whose_offsets_hold_them():
    ranges = {"a": {0: (0, 9)}, "b": {0: (5, 20), 1: (0, 3)}}
    asked = []

    def resolve(addresses):
        asked.extend(addresses)
        return {a: "b" for a in addresses}

    owner = attribute([(0, 2), (0, 7), (1, 1), (1, 9)], ranges, resolve)
    assert owner == {(0, 2): "a", (0, 7): "b", (1, 1): "b", (1, 9): None}
    assert asked == [(0, 7)]  # only the message two batches' ranges hold is read


def test_step_logs_give_runs_passed_over_and_trained_retracted_blocks():
    t = Trained()
    add_step_log(t, {"topic": "t", "seq_len": 8, "ranks": [{"1": [[0, 4, 0, 3]]}, {"1": [[1, 2, 5, 2]]}],
                     "retracted": [{"1": [[0, 5, 0, "r1"], [0, 5, 1, "r1"]]}, {}]})  # fmt: skip
    assert t.blocks_by_message() == Counter({(0, 4): 3, (1, 2): 2}) and t.passed_over == {"r1": 2}
    assert trained_retracted(t.runs, [BlockRange(partition=0, offset=4, first=1, end=9)]) == 2
    assert trained_retracted(t.runs, [BlockRange(partition=1, offset=0, last_offset=3)]) == 2
    assert trained_retracted(t.runs, [BlockRange(partition=1, offset=2, first=0, end=5)]) == 0


# -- the real stack --------------------------------------------------------------------------------------------------


@pytest.fixture
def stack_layout(stack):
    import uuid

    from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig

    uid = uuid.uuid4().hex[:8]
    return uid, PipelineLayout(
        raw_prefix=f"it-{uid}/raw/",
        shards_prefix=f"it-{uid}/shards/",
        exclusions_prefix=f"it-{uid}/exclusions/",
        checkpoints_prefix=f"it-{uid}/checkpoints/",
        topic=TopicConfig(name=f"it-{uid}-blocks", seq_len=64, message_bytes=16 * 1024),
    )


def test_a_trained_checkpoint_gets_its_summary_on_the_real_stack(stack, stack_layout, tmp_path):
    import dagster as dg

    import pipeline_project.defs.assets.content_summary as summary_module
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.dedup import DedupIndexResource
    from pipeline_project.defs.resources.trainer import TrainerResource
    from pipeline_project.demo.sample.corpus import generate
    from pipeline_project.provenance.content_summary import Stores, summarize
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project_tests.dagster_layer.test_training_graph import _ingest, _train

    uid, layout = stack_layout
    resources = build_resources(stack)
    resources["layout"] = layout
    resources["dedup"] = DedupIndexResource(postgres_url=stack.postgres_url, schema_name=f"it_{uid}")
    resources["cleaning"] = CleaningResource(workers=1)
    resources["trainer"] = TrainerResource(run_name=f"it-{uid}", batch_size=4, lr=3e-3, warmup_steps=2)
    s3 = stack.s3_client()
    files = [type(f)(f.key.replace("raw/sample/", "web/"), f.data) for f in generate(seed=3, docs_per_language=4)[:5]]
    with dg.instance_for_test() as instance:
        batch, _ = _ingest(instance, resources, layout, s3, files, None)
        meta, _checks = _train(instance, resources)
        assert meta["status"] == "trained" and meta["steps"] > 0

        result = dg.materialize(
            [*dg.load_assets_from_modules([summary_module]), *dg.load_asset_checks_from_modules([summary_module])],
            resources=resources,
            instance=instance,
            selection=[summary_module.training_content_summary.key],
        )
        assert result.success
    mat = result.get_asset_materialization_events()[0].materialization
    assert mat.metadata["counts_add_up"].value is True
    assert mat.metadata["checkpoint_uri"].value == meta["checkpoint_uri"]
    assert "## 2. List of data sources" in mat.metadata["summary"].value
    assert all(e.passed for e in result.get_asset_check_evaluations())

    json_key = mat.metadata["json_uri"].value.removeprefix(f"s3://{layout.bucket}/")
    assert json_key.startswith(f"{layout.checkpoints_prefix}it-{uid}/content-summary/step-")
    doc = json.loads(s3.get_object(Bucket=layout.bucket, Key=json_key)["Body"].read())
    assert doc["scope"]["batches"] == [batch] and doc["scope"]["unattributed_blocks"] == 0
    [row] = doc["accounting"]
    assert row["balanced"] and row["records_match"] and row["trained_blocks"] == meta["steps"] * 4
    [src] = doc["2_data_sources"]["sources"]
    assert src["prefix"] == f"{layout.raw_prefix}web/" and src["objects"] == len(files)
    assert src["bytes"] == sum(len(f.data) for f in files)
    assert src["documents"]["in"] == row["in"] == src["documents"]["kept"] + src["documents"]["dropped"] + src[
        "documents"]["quarantined"]  # fmt: skip
    assert doc["3_data_processing"]["cleaning_configs"]  # the config the batch was cleaned with, whole
    assert doc["1_general_information"]["size"]["tokens_trained"] == meta["steps"] * 4 * layout.topic.seq_len

    # the command's code path: the same document for the same checkpoint, without writing
    stores = Stores(
        s3=s3, bucket=layout.bucket, kafka=KafkaSettings(bootstrap_servers=stack.kafka_bootstrap),
        topic=layout.topic.name, checkpoints_root=layout.checkpoints_prefix, shards_prefix=layout.shards_prefix,
        raw_prefix=layout.raw_prefix,
    )  # fmt: skip
    again = summarize(stores, f"it-{uid}", doc["scope"]["checkpoint_step"], write=False)
    assert again.document["accounting"] == doc["accounting"] and again.adds_up
