"""The per-batch exclusion (`common/batch_lock.py`) on the stack's real PostgreSQL: one holder at a time, a waiter
that gives up says so in one line, and a holder that dies (SIGKILL: no cleanup runs) frees the batch at once, since
the server ends its session. A host cut off rather than dead: `cluster/test_pg_faults.py` and the server keepalives
(`stack/test_postgres_liveness.py`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from pipeline_project.common.batch_lock import BatchBusyError, batch_lock

HOLDER = """
import sys, time
from pipeline_project.common.batch_lock import batch_lock
with batch_lock(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_one_holder_at_a_time_and_a_waiter_that_gives_up_says_so(pg_url):
    with batch_lock(pg_url, "b-1"):
        busy = pytest.raises(BatchBusyError, match="batch b-1 is being written by another run")
        with busy as err, batch_lock(pg_url, "b-1", wait_s=0.5):
            pass  # pragma: no cover - never held
        assert "\n" not in str(err.value)
        with batch_lock(pg_url, "b-2", wait_s=0.5):  # another batch is not held
            pass
    with batch_lock(pg_url, "b-1", wait_s=0.5):  # released on exit
        pass


def test_a_waiter_gets_the_batch_when_the_holder_lets_go(pg_url):
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with batch_lock(pg_url, "b"):
            held.set()
            time.sleep(1.0)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(10)
    with batch_lock(pg_url, "b", wait_s=30):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]


def test_a_holder_killed_without_cleanup_frees_the_batch_at_once(pg_url):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, pg_url, "b-dead"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BatchBusyError), batch_lock(pg_url, "b-dead", wait_s=0.5):
            pass  # pragma: no cover - never held
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        started = time.monotonic()
        with batch_lock(pg_url, "b-dead", wait_s=10):
            waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait(10)
    assert waited < 5  # the server saw the connection close: no keepalive or timeout was needed
