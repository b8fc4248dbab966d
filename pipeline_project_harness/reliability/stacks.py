"""Throw-away stacks for fault trials: 3 Kafka brokers (RF 3, min ISR 2), S3, PostgreSQL and MLflow on free ports
under a temp state dir, wiped on exit; stacks a killed session left behind are reaped by the next one.
The shared stack on the default ports is never touched: every fault is a signal to a process of a throw-away one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from pipeline_project.stack import Stack
from pipeline_project_harness.reliability.faults import (
    ensure_transaction_state,
    kafka_of,
    throwaway_config,
)

BASE_SERVICES = ["postgres", "s3", "mlflow", "kafka"]


def _leftovers(state_dir: Path, dagster_only: bool) -> list[psutil.Process]:
    """Processes started for this stack that outlived `down`: a code server orphaned by a killed daemon and the run
    workers it still serves carry the stack's DAGSTER_HOME; with `dagster_only=False` also anything that runs from
    the state dir or has its cwd there (a service's orphaned child, once the whole stack is down)."""
    marker = str(state_dir)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            in_home = marker in proc.environ().get("DAGSTER_HOME", "")
            from_state = not dagster_only and (
                any(marker in arg for arg in proc.info["cmdline"] or ()) or proc.cwd().startswith(marker)
            )
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if in_home or from_state:
            found.append(proc)
    return found


def stop_leftovers(state_dir: Path, dagster_only: bool = True) -> None:
    procs = _leftovers(state_dir, dagster_only)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


ROOT_PREFIXES = ("reliability-stack-", "reliability-bench-")
OWNER_FILE = "owner.json"


def claim(root: Path) -> None:
    """Record which process owns a throw-away stack, so a later session can tell a dead owner's stack."""
    me = psutil.Process()
    (root / OWNER_FILE).write_text(json.dumps({"pid": me.pid, "create_time": me.create_time()}))


def _owner_alive(root: Path) -> bool:
    try:
        owner = json.loads((root / OWNER_FILE).read_text())
        return abs(psutil.Process(owner["pid"]).create_time() - owner["create_time"]) < 1.0
    except (FileNotFoundError, ValueError, KeyError, psutil.NoSuchProcess):
        return False


def reap_orphaned_stacks(tmp: Path | None = None) -> list[str]:
    """Stop and delete the throw-away stacks whose owning session died without its teardown (killed by a timeout,
    say): their processes are found through the pid files under their own state dir, never by name or port."""
    reaped = []
    for root in sorted(Path(tmp or tempfile.gettempdir()).glob("reliability-*-*")):
        if not root.name.startswith(ROOT_PREFIXES) or not (root / OWNER_FILE).exists() or _owner_alive(root):
            continue
        Stack(throwaway_config(root / "state")).down(wipe=True)
        stop_leftovers(root / "state", dagster_only=False)
        shutil.rmtree(root, ignore_errors=True)
        reaped.append(root.name)
    return reaped


@contextlib.contextmanager
def teardown_on_sigterm():
    """Turn SIGTERM (what `timeout` sends) into KeyboardInterrupt, so pytest still runs the fixtures' teardown."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def throwaway_stack(prefix: str) -> Iterator[Stack]:
    """The base services on free ports under a fresh temp dir; stopped and wiped on exit or SIGTERM."""
    reap_orphaned_stacks()
    # Not pytest's tmp_path: its root is private to the test user, and PostgreSQL runs as `postgres`.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    claim(root)
    stack = Stack(throwaway_config(root / "state"))
    with teardown_on_sigterm():
        try:
            stack.up(BASE_SERVICES, timeout=300)
            ensure_transaction_state(kafka_of(stack))
            yield stack
        finally:
            stack.down(wipe=True)
            stop_leftovers(stack.state_dir, dagster_only=False)
            shutil.rmtree(root, ignore_errors=True)
