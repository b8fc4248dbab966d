"""The trainer launcher is configuration: the pod PipesK8sClient would create (rendered by dagster-k8s's own
`build_pod_body`), the local command, the dispatch by `TrainerLaunch.launcher`, and the multi-node JobSet."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from pipeline_project.defs.resources import launchers
from pipeline_project.defs.resources.launchers import (
    JOB_CONFIG_ENV,
    TrainerLaunch,
    jobset_manifest,
    k8s_pod_spec,
    render_k8s_pod,
    subprocess_command,
)
from pipeline_project.defs.resources.launchers.commands import orphan_guard
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.job import JobConfig
from pipeline_project_tests.deploy import pod_env
from pipeline_project_tests.deploy.helpers import K8S, REPO, validate_k8s, yaml_docs

SECRET = "s3cret-value-never-in-a-spec"


@pytest.fixture
def job(monkeypatch) -> JobConfig:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", SECRET)
    kafka = KafkaSettings(
        bootstrap_servers="pipeline-kafka-kafka-bootstrap.pipeline.svc:9093",
        security_protocol="SASL_SSL",
        sasl_username="pipeline",
        sasl_password=SECRET,
        ssl_ca_location="/etc/kafka-ca/ca.crt",
    )
    return JobConfig(
        kafka=kafka, topic=TopicSpec(name="token-blocks", seq_len=256), dagster_run_id="r-1", partitions=["b1", "b2"]
    )


@pytest.fixture
def launch() -> TrainerLaunch:
    return TrainerLaunch(
        launcher="k8s",
        image="registry.example.com/pipeline/trainer:0.1.0",
        gpus_per_pod=4,
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        shm_size="32Gi",
        memory="400Gi",
        cpu="32",
        service_account="pipeline-trainer",
        secret_volumes={"pipeline-kafka-cluster-ca-cert": "/etc/kafka-ca"},
        env={"NCCL_DEBUG": "WARN"},
    )


def _container(pod: dict) -> dict:
    (container,) = pod["spec"]["containers"]
    return container


def test_the_rendered_pod_is_a_valid_pod(launch, job):
    pod = render_k8s_pod(launch, job)
    validate_k8s(pod)
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == "pipeline-trainer"
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_gpu_limits_tolerations_and_shm(launch, job):
    pod = render_k8s_pod(launch, job)
    resources = _container(pod)["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "4", "cpu": "32", "memory": "400Gi"}
    assert resources["requests"] == {"cpu": "32", "memory": "400Gi"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in _container(pod)["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert volumes[mounts["/scratch"]]["emptyDir"] == {"sizeLimit": "200Gi"}
    assert volumes[mounts["/etc/kafka-ca"]]["secret"] == {"secretName": "pipeline-kafka-cluster-ca-cert"}


def test_torchrun_starts_one_process_per_gpu_of_the_pod(launch, job):
    command = _container(render_k8s_pod(launch, job))["command"]
    assert command[0] == "torchrun"
    assert "--nproc-per-node=4" in command and "--standalone" in command
    assert command[-5:] == [
        "-m",
        "pipeline_project.training.entrypoint",
        "--config-env",
        JOB_CONFIG_ENV,
        "--require-cuda",
    ]
    cpu_pod = render_k8s_pod(launch.model_copy(update={"gpus_per_pod": 0}), job)
    assert "--nproc-per-node=1" in _container(cpu_pod)["command"]
    assert "nvidia.com/gpu" not in _container(cpu_pod)["resources"].get("limits", {})


def test_secrets_reach_the_pod_by_reference_never_by_value(launch, job):
    pod = render_k8s_pod(launch, job)
    assert SECRET not in json.dumps(pod)
    env = {e["name"]: e for e in _container(pod)["env"]}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "KAFKA_SASL_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        assert "value" not in env[name] and "secretKeyRef" in env[name]["valueFrom"], name
    assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "pipeline",
        "key": "password",
        "optional": False,
    }
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["optional"] is True  # IRSA needs no keys
    assert env["TMPDIR"]["value"] == "/scratch" and env["NCCL_DEBUG"]["value"] == "WARN"


def test_the_job_travels_in_the_environment_not_a_file(launch, job):
    env = {e["name"]: e for e in _container(render_k8s_pod(launch, job))["env"]}
    assert JobConfig.model_validate_json(env[JOB_CONFIG_ENV]["value"]) == job
    assert "sasl_password" not in env[JOB_CONFIG_ENV]["value"]
    assert not any("job.json" in arg for arg in _container(render_k8s_pod(launch, job))["command"])


def test_config_mistakes_fail_before_anything_launches(launch):
    with pytest.raises(ValueError, match="image"):
        k8s_pod_spec(TrainerLaunch(launcher="k8s"))
    with pytest.raises(ValueError, match="secret name"):
        k8s_pod_spec(launch.model_copy(update={"secret_env": {"X": "no-key"}, "optional_secrets": []}))
    with pytest.raises(ValueError, match="optional_secrets"):
        k8s_pod_spec(launch.model_copy(update={"optional_secrets": ["NOT_SET_ANYWHERE"]}))


def test_the_local_command_is_the_same_entry_point():
    guard = orphan_guard()
    assert guard == ["setpriv", "--pdeathsig", "KILL"]  # util-linux: on every Debian machine
    assert subprocess_command(1, python="py") == [
        *guard,
        "py",
        "-m",
        "pipeline_project.training.entrypoint",
        "--config-env",
        JOB_CONFIG_ENV,
    ]
    assert subprocess_command(2, python="py")[:3] == ["setpriv", "--pdeathsig", "TERM"]  # torchrun stops its ranks
    assert subprocess_command(2, python="py")[3:8] == [
        "py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
    ]


def test_a_niceness_prefixes_the_local_command_with_nice():
    guard = orphan_guard()
    assert subprocess_command(1, python="py", niceness=10)[:7] == ["nice", "-n", "10", *guard, "py"]
    assert subprocess_command(2, python="py", niceness=5)[:9] == [
        "nice",
        "-n",
        "5",
        *orphan_guard("TERM"),
        "py",
        "-m",
        "torch.distributed.run",
    ]
    assert subprocess_command(1, python="py", niceness=0)[:4] == [*guard, "py"]


def test_a_trainer_whose_run_worker_is_killed_stops_within_seconds(tmp_path):
    """The run worker stand-in starts the local command's prefix around a trainer that would run for minutes,
    then dies by SIGKILL (no handler runs): the kernel stops the trainer, also when it ignores SIGTERM (as it does
    when its parent did: an xdist worker of this very suite, which is how the first version of this guard failed)."""
    worker = (
        "import subprocess, sys, time\n"
        "import signal\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"cmd = [*{subprocess_command(1, niceness=10)[:-4]!r}, '-c', 'import time; time.sleep(300)']\n"
        "print(subprocess.Popen(cmd).pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True)
    trainer = int(proc.stdout.readline())
    time.sleep(0.5)
    assert _alive(trainer)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while _alive(trainer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(trainer), "the trainer outlived its run worker"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie is dead, waiting for init to reap it


@pytest.mark.parametrize(
    ("tags", "gpus", "niceness"),
    [
        ({"dagster/sensor_name": "checkpoint_trigger_sensor"}, 0, 10),  # triggered, CPU only: low priority
        ({"dagster/sensor_name": "checkpoint_trigger_sensor"}, 2, 0),  # a GPU trains at normal priority
        ({}, 0, 0),  # materialized by hand (the UI, the demo): normal priority
    ],
)
def test_only_a_triggered_training_without_a_gpu_runs_at_low_priority(monkeypatch, tags, gpus, niceness):
    from types import SimpleNamespace

    from pipeline_project.defs.resources import trainer

    launched = {}

    def launch(context, launch, job, nproc, niceness=0):
        launched.update(nproc=nproc, niceness=niceness)
        return SimpleNamespace(get_materialize_result=lambda: "result")

    monkeypatch.setattr(trainer, "launch_trainer", launch)
    monkeypatch.setattr(trainer.TrainerResource, "_gpus", lambda self: gpus)
    context = SimpleNamespace(run=SimpleNamespace(tags=tags))
    assert trainer.TrainerResource().run(context, job=None) == "result"
    assert launched == {"nproc": max(1, gpus), "niceness": niceness}


class _Recorder:
    calls: ClassVar[list[dict]] = []

    def __init__(self, **kwargs):
        self.init = kwargs

    def run(self, **kwargs):
        _Recorder.calls.append(kwargs)
        return "k8s-invocation"


def test_the_launcher_is_chosen_by_config(monkeypatch, launch, job):
    from types import SimpleNamespace

    import dagster as dg
    import dagster_k8s

    from pipeline_project.training import backlog

    handed = []  # the jobs whose batches went to S3 first (training.backlog): the same job here, no S3 at hand
    monkeypatch.setattr(backlog, "by_reference", lambda job, _s3, run_id: handed.append(run_id) or job)
    context = SimpleNamespace(run=SimpleNamespace(run_id="r-1"), log=SimpleNamespace(info=lambda _m: None))
    _Recorder.calls = []
    monkeypatch.setattr(dagster_k8s, "PipesK8sClient", _Recorder)
    assert launchers.launch_trainer(context, launch, job, nproc=1) == "k8s-invocation"
    (call,) = _Recorder.calls
    assert call["base_pod_spec"] == k8s_pod_spec(launch)
    assert call["env"][JOB_CONFIG_ENV] == job.model_dump_json()
    assert call["pod_wait_timeout"] == launch.pod_wait_timeout_s

    seen = {}
    monkeypatch.setattr(dg.PipesSubprocessClient, "run", lambda self, **kw: seen.update(kw, env=self.env) or "local")
    assert launchers.launch_trainer(context, TrainerLaunch(), job, nproc=1) == "local"
    assert seen["command"][-2:] == ["--config-env", JOB_CONFIG_ENV]
    assert seen["env"][JOB_CONFIG_ENV] == job.model_dump_json()
    assert handed == ["r-1", "r-1"]  # both launchers hand the job over by reference


def test_from_json_is_the_deployment_route():
    assert TrainerLaunch.from_json(None) == TrainerLaunch()
    assert TrainerLaunch.from_json('{"launcher": "k8s", "image": "i", "gpus_per_pod": 2}').gpus_per_pod == 2
    with pytest.raises(ValueError):
        TrainerLaunch.from_json('{"launcher": "slurm"}')


def _committed_jobset() -> dict:
    (doc,) = yaml_docs(K8S / "training" / "jobset.yaml")
    return doc


def test_the_committed_multinode_recipe_is_what_the_code_renders():
    """From the cluster's own TrainerLaunch: each node's pod is the pod Dagster launches (test_trainer_pods.py)."""
    settings = K8S / "base" / "settings.yaml"
    launch = launchers.launch_from_configmap(settings)
    assert launch == TrainerLaunch.from_json(pod_env.settings_data()["PIPELINE_TRAINER_LAUNCH"])
    rendered = jobset_manifest(
        launch, name="deepseek-multinode", nodes=2, job_configmap="deepseek-job", namespace="pipeline"
    )
    assert _committed_jobset() == rendered
    out = subprocess.run(
        [sys.executable, "-m", "pipeline_project.defs.resources.launchers", "jobset", "--nodes", "2",
         "--launch-from", str(settings)],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    assert yaml.safe_load(out.stdout) == rendered


def test_the_multinode_recipe_runs_torchrun_across_nodes_in_valid_pods():
    jobset = _committed_jobset()
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job_spec = replicated["template"]["spec"]
    # the Job inside the JobSet is a plain batch/v1 Job: Kubernetes' own schema checks it
    validate_k8s({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "node"}, "spec": job_spec})
    assert job_spec["completionMode"] == "Indexed" and job_spec["parallelism"] == job_spec["completions"] == 2
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    container = _container(job_spec["template"])
    command = container["command"]
    name = jobset["metadata"]["name"]
    assert command[:6] == [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={name}-{replicated['name']}-0-0.{name}:{launchers.RDZV_PORT}",
        f"--rdzv-id={name}",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env[JOB_CONFIG_ENV]["valueFrom"]["configMapKeyRef"] == {"name": "deepseek-job", "key": "job.json"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # one scratch volume per pod = per node: each node downloads the previous checkpoint once, into its own disk
    assert any(v["name"] == "scratch" and "emptyDir" in v for v in job_spec["template"]["spec"]["volumes"])


def test_the_code_location_does_not_import_dagster_k8s():
    code = "import sys, pipeline_project.definitions; print('dagster_k8s' in sys.modules, 'kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split()[-2:] == ["False", "False"]


def test_a_fixed_process_count_launches_without_asking_torch_for_gpus(monkeypatch):
    from types import SimpleNamespace

    from pipeline_project.defs.resources import trainer

    launched = {}

    def launch(context, launch, job, nproc, niceness=0):
        launched.update(nproc=nproc, niceness=niceness)
        return SimpleNamespace(get_materialize_result=lambda: "result")

    def no_torch(self):
        raise AssertionError("torch imported in the run worker")

    monkeypatch.setattr(trainer, "launch_trainer", launch)
    monkeypatch.setattr(trainer.TrainerResource, "_gpus", no_torch)
    context = SimpleNamespace(run=SimpleNamespace(tags={}))
    assert trainer.TrainerResource(nproc_per_node=2).run(context, job=None) == "result"
    assert launched == {"nproc": 2, "niceness": 0}
