"""Every ingest and training run carries its kind's `dagster/max_runtime` (from Settings), so run monitoring
fails a hung run and frees its slot (the hung-run trial on a real daemon: reliability/test_hung_run.py)."""

import json
import subprocess
import sys

import dagster as dg

from pipeline_project.defs.partitions import MAX_RUNTIME_TAG, TRAINING_RUN_TAGS, with_max_runtime
from pipeline_project.defs.resources.trainer import LINEAGE_TAG, MODEL_TAG
from pipeline_project_tests.dagster_layer.test_training_concurrency import _enough_untrained_tokens, _tick

CODE = """
import json
from pipeline_project.definitions import defs
(auto,) = [s for s in defs.sensors if s.name == "ingest_automation_sensor"]
print(json.dumps({"ingest_batch": dict(defs.resolve_job_def("ingest_batch").tags),
                  "train_checkpoint": dict(defs.resolve_job_def("train_checkpoint").tags),
                  "automation": dict(auto.run_tags)}))
"""


def test_jobs_and_the_automation_sensor_tag_runs_with_their_kinds_max_runtime():
    env = {"PIPELINE_INGEST_MAX_RUNTIME_S": "45", "PIPELINE_TRAINING_MAX_RUNTIME_S": "123"}
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CODE],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, **env},
    )
    tags = json.loads(out.stdout.strip().splitlines()[-1])
    assert tags["ingest_batch"][MAX_RUNTIME_TAG] == "45" and tags["automation"][MAX_RUNTIME_TAG] == "45"
    assert tags["train_checkpoint"][MAX_RUNTIME_TAG] == "123"
    assert tags["train_checkpoint"]["pipeline/kind"] == "training"


def test_the_checkpoint_trigger_requests_training_with_its_max_runtime(monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    monkeypatch.setenv("PIPELINE_TRAINING_MAX_RUNTIME_S", "321")
    with dg.instance_for_test() as instance:
        _enough_untrained_tokens(instance)
        (request,) = _tick(instance).run_requests
    assert request.tags == {**TRAINING_RUN_TAGS, MAX_RUNTIME_TAG: "321", LINEAGE_TAG: "deepseek", MODEL_TAG: "tiny"}


def test_zero_leaves_the_bound_to_the_instance():
    assert with_max_runtime(TRAINING_RUN_TAGS, 0) == TRAINING_RUN_TAGS
