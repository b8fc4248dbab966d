"""Every path compose mounts into a container of the project's images exists in the image, created and owned by
the user the image runs as. A path the image lacks is created by Docker at mount time, owned by root, and the
processes (uid 10001) cannot write there. Checked by parsing the Dockerfiles' final stage (no Docker here)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

import pytest
import yaml

from pipeline_project_tests.deploy.helpers import COMPOSE, IMAGES

IMAGE_DOCKERFILES = {
    "pipeline-user-code:${PIPELINE_IMAGE_TAG:-dev}": [IMAGES / "user-code.Dockerfile"],
}
# compose.gpu.yaml runs the user-code service from the trainer image: its mounts must exist there too
GPU_OVERRIDE = IMAGES / "trainer.Dockerfile"


def _final_stage(dockerfile: Path) -> list[str]:
    """The instructions of the last stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    last_from = max(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))
    return lines[last_from:]


def _runtime_user(stage: list[str]) -> tuple[str, str]:
    """(uid, user name) of the stage's USER, the name from the `useradd --uid` that created it."""
    uid = [line.split()[1] for line in stage if line.upper().startswith("USER ")][-1]
    for line in stage:
        match = re.search(rf"useradd\b.*--uid {uid} (\S+)", line)
        if match:
            return uid, match.group(1)
    raise AssertionError(f"USER {uid}: no `useradd --uid {uid}` in the final stage")


def image_dirs(dockerfile: Path) -> tuple[set[PurePosixPath], set[PurePosixPath]]:
    """(directories `mkdir -p` creates, trees `chown -R` gives the runtime user) in the final stage."""
    stage = _final_stage(dockerfile)
    uid, user = _runtime_user(stage)
    made: set[PurePosixPath] = set()
    owned: set[PurePosixPath] = set()
    for line in stage:
        if not line.upper().startswith("RUN "):
            continue
        for command in re.split(r"&&|;", line[4:]):
            words = shlex.split(command)
            if words[:2] == ["mkdir", "-p"]:
                made |= {PurePosixPath(w) for w in words[2:]}
            elif words[:2] == ["chown", "-R"] and words[2].split(":")[0] in (uid, user):
                owned |= {PurePosixPath(w) for w in words[3:]}
    return made, owned


def _mount_dirs(service: dict) -> set[PurePosixPath]:
    """The directories a service's volumes need in the image: a named volume's or a directory's target itself, a
    bind-mounted file's parent."""
    needed = set()
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        is_file = source.startswith(".") and (COMPOSE / source).is_file()
        needed.add(PurePosixPath(target).parent if is_file else PurePosixPath(target))
    return needed


def _cases() -> list[tuple[str, Path]]:
    services = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]
    cases = []
    for name, service in services.items():
        for dockerfile in IMAGE_DOCKERFILES.get(service.get("image", ""), []):
            cases.append((name, dockerfile))
        if name == "user-code":
            cases.append((name, GPU_OVERRIDE))
    return cases


CASES = _cases()


@pytest.mark.parametrize(("service", "dockerfile"), CASES, ids=[f"{s}-{d.name}" for s, d in CASES])
def test_every_mount_target_is_made_and_owned_in_the_image(service, dockerfile):
    services = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]
    made, owned = image_dirs(dockerfile)
    for target in _mount_dirs(services[service]):
        assert target in made, f"{dockerfile.name} never creates {target} (compose service {service} mounts it)"
        assert any(target == o or o in target.parents for o in owned), (
            f"{dockerfile.name}: {target} is not chowned to the runtime user"
        )


def test_the_parser_sees_a_missing_directory(tmp_path):
    broken = tmp_path / "x.Dockerfile"
    broken.write_text("FROM a\nRUN useradd --uid 10001 p \\\n    && mkdir -p /a\nUSER 10001\n")
    made, owned = image_dirs(broken)
    assert made == {PurePosixPath("/a")} and owned == set()


def test_the_user_code_services_mount_something():
    assert {s for s, _ in CASES} >= {"user-code", "dagster-daemon", "dagster-webserver"}
