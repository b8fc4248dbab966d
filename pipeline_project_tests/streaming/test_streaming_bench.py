"""bench/streaming_bench.py's consume reference: a ConsumerPerformance run counts only when it read what it was asked."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
    "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("streaming_bench", BENCH / "streaming_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["streaming_bench"] = module
    spec.loader.exec_module(module)
    return module


def _out(mb: float, n: int, fetch_mb_s: float) -> str:
    return f"{HEADER}\n2026-12-06 10:00:00:000, 2026-12-06 10:00:02:000, {mb}, 64.0, {n}, 100.0, 300, 1700, {fetch_mb_s}, 120.0\n"


def test_a_run_that_read_every_message_it_was_asked_for_gives_its_fetch_rate(bench):
    row = bench.consumer_perf_row(_out(128.0, 4096, 75.3), 4096, 128 * bench.MIB)
    assert row["fetch.MB.sec"] == 75.3


@pytest.mark.parametrize("mb, n", [(127.0, 4064), (128.0, 4095)])
def test_a_run_that_read_less_than_asked_waited_out_its_timeout_and_is_refused(bench, mb, n):
    # asked for offsets-minus-markers more than the topic holds, the tool reads all and then waits 60 s
    with pytest.raises(bench.ImplausibleReferenceError, match="asked for 4096"):
        bench.consumer_perf_row(_out(mb, n, 3.2), 4096, 128 * bench.MIB)


def test_output_without_a_result_row_is_refused(bench):
    with pytest.raises(bench.ImplausibleReferenceError, match="no result header"):
        bench.consumer_perf_row("WARN something\n", 1, 1)
