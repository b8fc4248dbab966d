"""The demo runs DeepSeek-style (issue 31): its sample plants a HumanEval problem and has code enough for FIM, and
the stack's Dagster, which the demo's runs go through, lays out code for FIM and decontaminates. No services: the
stack's corpus settings are checked as its Dagster processes get them, and the ingest graph runs on stand-ins."""

from __future__ import annotations

import json
import uuid

import dagster as dg
import pytest

from pipeline_project.defs.resources import build_resources
from pipeline_project.demo.sample.corpus import generate
from pipeline_project.demo.sample.deepseek import PLANTED_KEY, demo_sample, humaneval_problems
from pipeline_project.settings import Settings
from pipeline_project.stack.config import StackConfig
from pipeline_project.stack.dagster import DagsterService
from pipeline_project.streaming.produce.fim import FimConfig, FimPolicy

CORPUS_VARS = ("PIPELINE_FIM_CODE_RATE", "PIPELINE_CLEANING_CONFIG")


@pytest.fixture
def clean_env(monkeypatch):
    for name in CORPUS_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _stack_dagster_env(tmp_path) -> dict[str, str]:
    """The environment the stack gives its Dagster webserver and daemon (and so their code servers and runs)."""
    (webserver, daemon) = DagsterService(StackConfig(state_dir=tmp_path)).processes()
    assert webserver.env == daemon.env
    return dict(webserver.env)


def test_the_demo_sample_embeds_a_humaneval_problem_read_from_the_installed_package():
    problems = humaneval_problems()
    assert len(problems) == 164
    files = {f.key: f.data for f in demo_sample(seed=170)}
    (planted,) = [json.loads(line) for line in files[PLANTED_KEY].decode().splitlines()]
    problem = problems[170 % 164]
    assert (problem["prompt"] + problem["canonical_solution"]).rstrip() in planted["text"]
    assert planted["path"].endswith(".py")  # routed to the code profile
    # generate's files come first (gzip stamps its members with the time: keys compared), the demo's code after
    keys = [f.key for f in generate(seed=170)]
    assert list(files)[: len(keys)] == keys and len(files) == len(keys) + 2
    again = {f.key: f.data for f in demo_sample(seed=170)}
    assert all(again[k] == files[k] for k in (PLANTED_KEY, "raw/sample/code/more_modules.jsonl"))
    assert len(files["raw/sample/code/more_modules.jsonl"].decode().splitlines()) == 80


def test_the_stacks_dagster_runs_with_fim_for_code_and_humaneval_decontamination(clean_env, tmp_path):
    env = _stack_dagster_env(tmp_path)
    for name in CORPUS_VARS:
        clean_env.setenv(name, env[name])
    resources = build_resources(Settings())
    assert resources["layout"].topic_spec.fim == FimPolicy(domains={"code": FimConfig(rate=0.1, mode="psm")})
    decontamination = resources["cleaning"].config().decontamination
    assert decontamination.enabled and [b.name for b in decontamination.benchmarks] == ["humaneval"]


def test_the_library_default_stays_off(clean_env):
    resources = build_resources(Settings())
    assert not resources["layout"].topic_spec.fim.active
    assert not resources["cleaning"].config().decontamination.enabled


def test_a_shell_that_sets_the_corpus_variables_keeps_them_for_the_stacks_dagster(clean_env, tmp_path):
    clean_env.setenv("PIPELINE_FIM_CODE_RATE", "0")
    clean_env.setenv("PIPELINE_CLEANING_CONFIG", str(tmp_path / "mine.json"))
    env = _stack_dagster_env(tmp_path)
    assert (env["PIPELINE_FIM_CODE_RATE"], env["PIPELINE_CLEANING_CONFIG"]) == ("0", str(tmp_path / "mine.json"))


def test_the_demo_reads_the_corpus_settings_off_a_code_location_as_dagster_shows_them(clean_env, tmp_path):
    """The RESOURCES_QUERY the demo sends to the stack's webserver, answered by a code server that loads the
    project's definitions with the stack's Dagster environment."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    from pipeline_project import definitions
    from pipeline_project.demo.corpus_check import RESOURCES_QUERY, corpus_settings, resources_of

    env = _stack_dagster_env(tmp_path)
    for name in CORPUS_VARS:
        clean_env.setenv(name, env[name])  # the code server, a child process, inherits them
    with (
        dg.instance_for_test() as instance,
        define_out_of_process_context(definitions.__file__, None, instance) as context,
    ):
        answer = execute_dagster_graphql(context, RESOURCES_QUERY).data
    on = corpus_settings(resources_of(answer))
    assert (on.fim, on.benchmarks, on.missing()) == ({"code": (0.1, "psm")}, ("humaneval",), [])
    assert on.describe() == "FIM code at 0.1 (psm); decontamination humaneval"


def test_a_code_location_without_the_corpus_settings_is_named_with_what_it_lacks():
    from pipeline_project.demo.corpus_check import corpus_settings

    off = corpus_settings({"layout": {"bucket": '"pipeline"'}, "cleaning": {}})  # the library defaults
    assert off.missing() == ["FIM for code", "decontamination"]
    assert off.describe() == "FIM off; decontamination off"


def test_the_demo_sample_through_the_ingest_graph_counts_fim_and_decontaminated_documents(clean_env, tmp_path):
    """raw_text -> cleaned_shards -> token_blocks on stand-ins, with the stack's Dagster corpus settings: the
    token_blocks metadata and the demo's summary carry the counts, as numbers."""
    from pipeline_project.defs.assets.cleaned import cleaned_shards
    from pipeline_project.defs.assets.raw import raw_text
    from pipeline_project.defs.assets.token_blocks import token_blocks
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
    from pipeline_project.demo.runner import summarize
    from pipeline_project_tests.dagster_layer.standins import standin_resources

    env = _stack_dagster_env(tmp_path)
    uid = uuid.uuid4().hex[:8]
    stack_settings = Settings(
        fim_code_rate=float(env["PIPELINE_FIM_CODE_RATE"]), cleaning_config_path=env["PIPELINE_CLEANING_CONFIG"]
    )
    wired = build_resources(stack_settings)
    topic = {**wired["layout"].topic.model_dump(), "seq_len": 64, "message_bytes": 16384}
    layout = PipelineLayout(**{**wired["layout"].model_dump(), "raw_prefix": f"demo-{uid}/raw/", "topic": topic})
    res = {
        **standin_resources(uid, layout),
        "cleaning": CleaningResource(workers=1, config_path=wired["cleaning"].config_path),
    }
    client = res["s3"].get_client()
    for f in demo_sample(seed=11, docs_per_language=4):
        client.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)
    with dg.instance_for_test() as instance:
        with dg.build_sensor_context(instance=instance, resources={k: res[k] for k in ("s3", "layout")}) as ctx:
            batch = raw_s3_sensor(ctx).run_requests[0].partition_key
        instance.add_dynamic_partitions(batches.name, [batch])
        result = dg.materialize([raw_text, cleaned_shards, token_blocks], resources=res, partition_key=batch,
                                instance=instance)  # fmt: skip
        assert result.success
        (meta,) = [
            {k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()
            if e.materialization.asset_key == token_blocks.key
        ]
        table = summarize(instance, Settings(), [batch], {})
    rows = dict(zip(table.columns[0]._cells, table.columns[1]._cells, strict=True))
    assert meta["decontaminated"] == meta["decontaminated_humaneval"] == 1
    assert meta["fim_docs"] == meta["fim_docs_code"] >= 1
    assert rows["decontaminated"] == "1 (humaneval 1)"
    assert int(rows["FIM documents"]) == meta["fim_docs"]
