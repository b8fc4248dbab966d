import json

import pytest

from pipeline_project.streaming.errors import TopicRecreatedError
from pipeline_project.streaming.load.state import (
    Cursor,
    Interleaver,
    StateError,
    make_state,
    merge_states,
    parse_cursors,
    same_layout,
)


def _draw(il: Interleaver, active: set[int], n: int) -> list[int]:
    return [il.next_partition(active) for _ in range(n)]


def test_interleave_is_seeded_and_deterministic():
    workers = {0: (0, 2, 4), 1: (1, 3)}
    a = _draw(Interleaver(workers, seed=7, rank=0), {0, 1, 2, 3, 4}, 200)
    b = _draw(Interleaver(workers, seed=7, rank=0), {0, 1, 2, 3, 4}, 200)
    c = _draw(Interleaver(workers, seed=8, rank=0), {0, 1, 2, 3, 4}, 200)
    assert a == b
    assert a != c
    # round-robin over workers: even draws from worker 0, odd from worker 1
    assert set(a[0::2]) == {0, 2, 4}
    assert set(a[1::2]) == {1, 3}


def test_interleave_skips_inactive_partitions_and_workers():
    il = Interleaver({0: (0, 2), 1: (1,)}, seed=0, rank=0)
    assert _draw(il, {2}, 5) == [2] * 5
    assert il.next_partition(set()) is None


def test_interleave_state_roundtrip_through_json_continues_identically():
    workers = {0: (0, 2, 4), 1: (1, 3, 5)}
    active = {0, 1, 2, 3, 4, 5}
    il = Interleaver(workers, seed=3, rank=1)
    _draw(il, active, 37)
    saved = json.loads(json.dumps(il.get_state()))
    expected = _draw(il, active, 100)
    fresh = Interleaver(workers, seed=3, rank=1)
    fresh.set_state(saved)
    assert _draw(fresh, active, 100) == expected


def test_interleave_state_with_other_workers_is_rejected():
    state = Interleaver({0: (0,), 1: (1,)}, seed=0, rank=0).get_state()
    with pytest.raises(StateError, match="workers"):
        Interleaver({0: (0, 1)}, seed=0, rank=0).set_state(state)


def _state(rank=0, partitions=None, topic_id="id-A"):
    return make_state(
        topic="t",
        topic_id=topic_id,
        rank=rank,
        world_size=2,
        num_workers=1,
        seed=0,
        cursors=partitions or {0: Cursor(10, 2), 2: Cursor(5)},
        current=0,
        interleave={"rr": 0, "rng": {}},
    )


def test_state_is_json_serializable_and_parses_back():
    state = json.loads(json.dumps(_state()))
    assert parse_cursors(state, topic="t") == {0: Cursor(10, 2), 2: Cursor(5, 0)}
    assert same_layout(state, rank=0, world_size=2, num_workers=1, seed=0)
    assert not same_layout(state, rank=1, world_size=2, num_workers=1, seed=0)


def test_state_for_another_topic_or_version_is_rejected():
    with pytest.raises(StateError, match="topic 't'"):
        parse_cursors(_state(), topic="other")
    with pytest.raises(StateError, match="format_version 99"):
        parse_cursors({**_state(), "format_version": 99}, topic="t")


def test_state_of_a_recreated_topic_is_rejected_naming_both_ids():
    state = json.loads(json.dumps(_state()))
    assert state["format_version"] == 3 and state["topic_id"] == "id-A"
    assert parse_cursors(state, topic="t", topic_id="id-A") == {0: Cursor(10, 2), 2: Cursor(5)}
    with pytest.raises(TopicRecreatedError, match=r"id-A.*id-B") as ei:
        parse_cursors(state, topic="t", topic_id="id-B")
    assert (ei.value.saved_id, ei.value.current_id) == ("id-A", "id-B")
    assert isinstance(ei.value, StateError)


def test_version_1_state_still_loads_with_a_warning_that_the_id_is_unchecked(caplog):
    v1 = {k: v for k, v in _state().items() if k != "topic_id"} | {"format_version": 1}
    with caplog.at_level("WARNING"):
        assert parse_cursors(v1, topic="t", topic_id="id-B") == {0: Cursor(10, 2), 2: Cursor(5)}
    assert "carries no topic id" in caplog.text


def test_merge_states_unions_rank_cursors():
    merged = merge_states([_state(0, {0: Cursor(10, 2), 2: Cursor(5)}), _state(1, {1: Cursor(3), 3: Cursor(4)})])
    assert parse_cursors(merged, topic="t") == {0: Cursor(10, 2), 1: Cursor(3), 2: Cursor(5), 3: Cursor(4)}
    assert merged["interleave"] is None
    assert merged["topic_id"] == "id-A"
    with pytest.raises(StateError, match="partition 0 appears in two rank states"):
        merge_states([_state(0, {0: Cursor(1)}), _state(1, {0: Cursor(2)})])
    with pytest.raises(StateError, match="different topic ids"):
        merge_states([_state(0, {0: Cursor(1)}), _state(1, {1: Cursor(2)}, topic_id="id-B")])
