"""wait_until_visible and list_offsets against an admin client whose first ListOffsets hangs, as one sent to a killed
broker does."""

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import ReadTimeoutError, VisibilityTimeoutError
from pipeline_project.streaming.kafka import offsets, visibility


class HangingThenStableAdmin:
    """The first `hang` calls return futures that never complete; later ones report `lso` per partition."""

    def __init__(self, hang: int, lso: int):
        self.hang, self.lso, self.calls = hang, lso, 0

    def list_offsets(self, request, isolation_level, request_timeout):
        self.calls += 1
        futures = {}
        for tp in request:
            fut: Future = Future()
            if self.calls > self.hang:
                fut.set_result(SimpleNamespace(offset=self.lso))
            futures[tp] = fut
        return futures


@pytest.fixture(autouse=True)
def short_attempts(monkeypatch):
    monkeypatch.setattr(offsets, "ATTEMPT_S", 0.1)


def test_a_hung_request_costs_one_attempt_not_the_wait():
    admin = HangingThenStableAdmin(hang=1, lso=11)
    waited = visibility.wait_until_visible(admin, {("t", 0): 10, ("t", 1): 3}, timeout_s=30)
    assert admin.calls == 2 and waited < 5


def test_records_that_never_become_visible_raise_naming_the_partition():
    admin = HangingThenStableAdmin(hang=0, lso=5)
    with pytest.raises(VisibilityTimeoutError, match=r"t\[0\] last stable offset 5, written up to 10"):
        visibility.wait_until_visible(admin, {("t", 0): 10}, timeout_s=0.5)


def test_list_offsets_retries_a_hung_request_within_its_budget():
    admin = HangingThenStableAdmin(hang=1, lso=7)
    assert offsets.list_offsets(admin, "t", [0, 1], OffsetSpec.latest(), timeout_s=30) == {0: 7, 1: 7}
    assert admin.calls == 2


def test_list_offsets_that_never_answer_raise_a_read_timeout_naming_the_partitions():
    admin = HangingThenStableAdmin(hang=10**6, lso=0)
    with pytest.raises(ReadTimeoutError, match=r"ListOffsets for t\[0\], t\[1\] did not succeed within 0.5s"):
        offsets.list_offsets(admin, "t", [0, 1], OffsetSpec.latest(), timeout_s=0.5)
