"""The stack does not depend on where the checkout lives: under /tmp, or inside a mode-700 directory (root's home
in most containers and CI runners), which the `postgres` user that runs PostgreSQL cannot enter."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from pipeline_project.cluster.netns import under_tmp
from pipeline_project.stack import postgres as pg


@pytest.fixture
def locked_dir():
    """A mode-700 directory under /tmp, as a home directory is."""
    path = Path(tempfile.mkdtemp(prefix="pp-home-", dir="/tmp"))
    path.chmod(0o700)
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_the_postgres_user_is_found_unable_to_enter_a_mode_700_directory(locked_dir):
    assert pg.reachable_by(locked_dir / "checkout" / ".state" / "postgres", pg.RUN_AS) is False
    os.chmod(locked_dir, 0o755)
    assert pg.reachable_by(locked_dir / "checkout" / ".state" / "postgres", pg.RUN_AS) is True


def test_the_servers_files_move_out_of_a_directory_its_user_cannot_enter(locked_dir, monkeypatch):
    from pipeline_project.stack.config import StackConfig

    monkeypatch.setattr(pg.os, "geteuid", lambda: 0)  # as root the server runs as the postgres user

    service = pg.PostgresService(StackConfig(state_dir=locked_dir / "checkout" / ".state"))
    assert service.server_dir.is_relative_to(pg.SERVER_HOME) and service.data_dir.parent == service.server_dir
    assert service.data_dirs() == [service.dir, service.server_dir]  # `down --wipe` deletes both
    reachable = pg.PostgresService(StackConfig(state_dir=Path("/var/tmp/pp-state")))
    assert reachable.server_dir == reachable.dir


def test_paths_under_tmp_are_kept_visible_on_a_host_once_each():
    assert under_tmp([Path("/tmp/ci/main"), Path("/tmp/ci/main/.cluster/h"), Path("/usr"), Path("/tmp")]) == [
        "/tmp/ci/main"
    ]


@pytest.mark.stack
def test_a_stack_whose_state_is_in_a_mode_700_directory_under_tmp_runs_postgresql(locked_dir):
    """A stack of its own (free port, PostgreSQL only) whose state dir is where a checkout in root's home keeps it."""
    import psycopg2

    from pipeline_project.stack import Stack
    from pipeline_project_harness.reliability.faults import free_ports

    stack = Stack(state_dir=locked_dir / "checkout" / ".state", postgres_port=free_ports(1)[0])
    service = stack.services["postgres"]
    try:
        stack.up(["postgres"], timeout=120)
        conn = psycopg2.connect(stack.config.postgres_url("postgres"), connect_timeout=10)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT current_setting('data_directory')")
            data_directory = cur.fetchone()[0]
        conn.close()
        assert Path(data_directory) == service.data_dir
        assert not service.data_dir.is_relative_to(locked_dir)  # moved where the postgres user can reach it
    finally:
        stack.down(["postgres"], wipe=True)
    assert not service.server_dir.exists()
