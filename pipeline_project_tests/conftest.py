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
from filelock import FileLock

from pipeline_project.settings import Settings
from pipeline_project.stack import DEFAULT_SERVICES, Stack

REPO_ROOT = Path(__file__).resolve().parents[1]


# Fixtures that start or need a real service: a test using one is in the integration tier (`tier_of`).
SERVICE_FIXTURES = {"stack", "local_stack", "pg_url", "pg_instance", "secure", "s3_stack"}
FAULT_FIXTURES = {"fault_stack", "healthy_stack"}  # a throw-away stack whose processes the test kills or cuts
CLUSTER_FIXTURES = {"cluster"}  # the namespace cluster
# Session or module fixtures of one shared process (Dagster's webserver, a SASL cluster): every test that uses one
# runs on the same pytest-xdist worker (`--dist loadgroup`), so the process starts once and no other test stops it.
# The fault tests share their throw-away stack, so they run one after another on a worker of their own.
SHARED_PROCESS_GROUPS = {"stack_dagster": "dagster", "secure": "secure", "fault_stack": "fault"}


def tier_of(fixtures: set[str], marks: set[str]) -> str | None:
    """The tier a test runs in, from the fixtures it uses and its marks alone (never its folder): `cluster`,
    `fault`, `integration`, or None for the fast tier. The `stack` mark covers a test that starts services itself."""
    if fixtures & CLUSTER_FIXTURES:
        return "cluster"
    if fixtures & FAULT_FIXTURES:
        return "fault"
    if fixtures & SERVICE_FIXTURES or "stack" in marks:
        return "integration"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into each test's node id
def pytest_collection_modifyitems(config, items):
    """Tiers (`scripts/test.sh --fast | --integration | --fault | --cluster`) and xdist groups, set per test."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        tier = tier_of(fixtures, {m.name for m in item.iter_markers()})
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
        for name in sorted(fixtures & SHARED_PROCESS_GROUPS.keys()):
            item.add_marker(pytest.mark.xdist_group(SHARED_PROCESS_GROUPS[name]))


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
    with FileLock(users_dir / ".starting"):  # pytest-xdist workers (and other sessions) start it once
        if not stack.is_healthy(DEFAULT_SERVICES):
            started = stack.up(DEFAULT_SERVICES, timeout=300)
    try:
        yield stack
    finally:
        marker.unlink(missing_ok=True)
        if started and not _other_live_sessions(users_dir):
            stack.stop(started)


@pytest.fixture(scope="session")
def stack_dagster(local_stack: Stack) -> Iterator[Path]:
    """The stack's Dagster (webserver and daemon) for this session, its instance's home yielded. The checkpoint
    trigger is held while the session runs: the daemon never trains in the background of the suite (a test that
    needs the trigger releases the hold itself)."""
    import time

    import dagster as dg

    from pipeline_project.defs.sensors.trigger_policy import hold_trigger, release_trigger

    with FileLock(local_stack.state_dir / "test-sessions" / ".starting"):
        started = local_stack.up(["dagster"], timeout=300)
    home = local_stack.services["dagster"].home
    owner = f"pytest-{os.getpid()}"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        hold_trigger(instance, owner, seconds=4 * 3600, now=time.time())
    try:
        yield home
    finally:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            release_trigger(instance, owner)
        if started and not _other_live_sessions(local_stack.state_dir / "test-sessions"):
            local_stack.stop(started)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With PIPELINE_TEST_CPU_LOG=path, one JSON line per test: wall seconds and the CPU seconds of this process and
    of the children it reaped (trainers, tools), so the suite's CPU hogs can be told from its waiters
    (docs/benchmarks: suite tiers). Services of the stack and Dagster's run workers are not counted."""
    path = os.environ.get("PIPELINE_TEST_CPU_LOG")
    if not path:
        yield
        return
    import json
    import resource
    import time

    def cpu(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    wall, own, kids = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    yield
    row = {
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - wall, 2),
        "cpu_self_s": round(cpu(resource.RUSAGE_SELF) - own, 2),
        "cpu_children_s": round(cpu(resource.RUSAGE_CHILDREN) - kids, 2),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
