"""Session fixtures shared by every test area.

`stack` yields `Settings` for a healthy local stack (Kafka x3, S3, MLflow): it reuses a running one, or starts the
missing services for this session and stops only those at the end (unless another test session still uses them).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pipeline_project.settings import Settings
from pipeline_project.stack import DEFAULT_SERVICES, Stack

REPO_ROOT = Path(__file__).resolve().parents[1]


# Fixtures that start or need a real service: a test using one is in the integration tier.
SERVICE_FIXTURES = {"stack", "local_stack", "pg_url", "pg_instance", "fault_stack", "healthy_stack", "cluster"}


def pytest_collection_modifyitems(config, items):
    """Tiers (`scripts/test.sh --fast | --integration | --fault | --cluster`): the fault tier is
    `reliability/`, the cluster tier `cluster/`, the integration tier every other test that needs a real service
    (through a fixture above or the `stack` mark); the rest is the fast tier."""
    for item in items:
        path = Path(str(item.fspath)).relative_to(REPO_ROOT / "pipeline_project_tests").parts
        if path[0] == "reliability":
            item.add_marker(pytest.mark.fault)
        elif path[0] == "cluster":
            if "cluster" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.cluster)
        elif (
            path[0] in ("stack", "ui")  # these start, stop or drive services of their own
            or SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
            or item.get_closest_marker("stack")
        ):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_corpus() -> Path:
    corpus = REPO_ROOT.parent / "shared" / "corpus"
    assert corpus.is_dir(), f"the shared corpus is expected at {corpus}"
    return corpus


def _register_session(users_dir: Path) -> Path:
    users_dir.mkdir(parents=True, exist_ok=True)
    marker = users_dir / str(os.getpid())
    marker.touch()
    return marker


def _other_live_sessions(users_dir: Path) -> list[int]:
    others = []
    for marker in users_dir.glob("*"):
        pid = int(marker.name) if marker.name.isdigit() else None
        if pid is None or pid == os.getpid():
            continue
        if psutil.pid_exists(pid):
            others.append(pid)
        else:
            marker.unlink(missing_ok=True)
    return others


@pytest.fixture(scope="session")
def local_stack() -> Iterator[Stack]:
    """The `Stack` object behind the `stack` fixture, healthy for the whole session."""
    stack = Stack()
    users_dir = stack.state_dir / "test-sessions"
    marker = _register_session(users_dir)
    started: list[str] = []
    if not stack.is_healthy(DEFAULT_SERVICES):
        started = stack.up(DEFAULT_SERVICES, timeout=300)
    try:
        yield stack
    finally:
        marker.unlink(missing_ok=True)
        if started and not _other_live_sessions(users_dir):
            stack.stop(started)


@pytest.fixture(scope="session")
def stack(local_stack: Stack) -> Settings:
    return local_stack.settings()


@pytest.fixture
def pg_url(stack):
    """A fresh database on the stack's server, dropped afterwards, so tests never see each other's index."""
    import psycopg2

    name = f"test_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(stack.postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    url = stack.postgres_url.rsplit("/", 1)[0] + f"/{name}"
    yield url
    admin = psycopg2.connect(stack.postgres_url)  # a new session: a test may have restarted the server
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.close()
