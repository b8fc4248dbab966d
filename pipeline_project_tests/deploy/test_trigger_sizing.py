"""The cluster's training trigger is sized for its GPU pod, not the laptop: the tokens that start a triggered run
keep the pod busy for many steps, and a triggered run is bounded."""

from __future__ import annotations

import json

from pipeline_project.settings import DEFAULT_MIN_NEW_TOKENS
from pipeline_project_tests.deploy.helpers import K8S, yaml_docs

MIN_STEPS_PER_RUN = 100  # a pod start (image pull, rendezvous, checkpoint download) costs minutes
TOKENS_PER_GPU_ROW = 4096  # one sequence per GPU per step, the least a GPU preset trains


def test_the_cluster_trigger_starts_the_gpu_pod_for_many_steps_not_seconds():
    (config,) = [d for d in yaml_docs(K8S / "base" / "settings.yaml") if d["kind"] == "ConfigMap"]
    data = config["data"]
    gpus = json.loads(data["PIPELINE_TRAINER_LAUNCH"])["gpus_per_pod"]
    min_tokens = int(data["PIPELINE_MIN_NEW_TOKENS"])
    assert min_tokens >= MIN_STEPS_PER_RUN * gpus * TOKENS_PER_GPU_ROW > DEFAULT_MIN_NEW_TOKENS
    assert int(data["PIPELINE_TRIGGER_MAX_STEPS"]) > 0
