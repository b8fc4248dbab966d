"""Pid-file tracked processes with real (tiny) OS processes: spawn, identify, stop, escalate to SIGKILL."""

from __future__ import annotations

import sys
import time

import psutil

from pipeline_project.stack.processes import ManagedProcess, stop_all

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
WITH_CHILD = "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"


def managed(tmp_path, name: str, code: str, stop_timeout: float = 5.0) -> ManagedProcess:
    return ManagedProcess(
        name=name,
        cmd=(sys.executable, "-c", code),
        pid_file=tmp_path / f"{name}.pid",
        log_file=tmp_path / f"{name}.log",
        stop_timeout=stop_timeout,
    )


def test_spawned_process_is_recognised_and_stopped_with_its_children(tmp_path):
    mp = managed(tmp_path, "parent", WITH_CHILD)
    popen = mp.spawn()
    deadline = time.monotonic() + 30
    while not psutil.Process(popen.pid).children() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = psutil.Process(popen.pid).children()[0]
    assert mp.pid == popen.pid

    assert mp.stop() is True
    popen.wait(5)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert not mp.pid_file.exists()
    assert mp.pid is None


def test_a_process_ignoring_sigterm_is_killed_after_the_timeout(tmp_path):
    mp = managed(tmp_path, "stubborn", IGNORES_SIGTERM, stop_timeout=1.0)
    popen = mp.spawn()
    time.sleep(1.0)  # let it install the handler
    start = time.monotonic()
    assert stop_all([mp]) == ["stubborn"]
    elapsed = time.monotonic() - start
    assert not psutil.pid_exists(popen.pid), "SIGKILL must follow the ignored SIGTERM"
    assert 0.9 < elapsed < 10, "it outlived SIGTERM for the whole grace period, then died"


def test_log_tail_returns_the_last_lines(tmp_path):
    mp = managed(tmp_path, "talker", "print('\\n'.join(f'line {i}' for i in range(100)))")
    mp.spawn().wait(30)
    assert mp.tail(3) == ["line 97", "line 98", "line 99"]


def test_a_running_process_whose_command_line_cannot_be_read_is_stopped_not_forgotten(tmp_path, monkeypatch):
    """Issue 37: `stop()` unlinked the pid file of a process it could not match, and left it running. A server run
    as another user (PostgreSQL as `postgres`) under a /proc that hides other users' command lines is one: its
    pid and start time are the ones recorded, only its command line is unreadable."""
    mp = managed(tmp_path, "other-user", "import time; time.sleep(600)")
    popen = mp.spawn()

    def hidden(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "cmdline", hidden)
    assert mp.is_running() and mp.stop() is True
    popen.wait(10)
    assert popen.returncode is not None and not mp.pid_file.exists()
