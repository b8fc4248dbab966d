"""The mixture sampler: deterministic, exact to the block, resumable, split over DDP ranks, changeable."""

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from pipeline_project.streaming.load.mixture import PARTS, MixtureConfig, MixtureSampler, RankMixture, to_parts

W = {"en_web": 0.5, "zh_web": 0.3, "code": 0.15, "books": 0.05}


def _draw(sampler, n):
    return [sampler.next() for _ in range(n)]


def test_same_seed_same_sequence_other_seed_other_phase():
    assert _draw(MixtureSampler(W, seed=3), 500) == _draw(MixtureSampler(W, seed=3), 500)
    assert _draw(MixtureSampler(W, seed=3), 500) != _draw(MixtureSampler(W, seed=4), 500)


def test_every_prefix_is_within_two_blocks_of_the_target_and_10k_within_a_tenth_of_a_percent():
    seq = _draw(MixtureSampler(W, seed=11), 10_000)
    counts: Counter = Counter()
    for i, d in enumerate(seq, 1):
        counts[d] += 1
        assert all(abs(counts[x] - i * w) < 2 for x, w in W.items()), (i, counts)
    assert all(abs(counts[d] / 10_000 - w) <= 0.001 for d, w in W.items())


def test_parts_sum_exactly_and_config_validates():
    parts = to_parts({"a": 1, "b": 1, "c": 1})
    assert sum(parts.values()) == PARTS and sorted(parts.values()) == [333_333, 333_333, 333_334]
    cfg = MixtureConfig(proportions={"b": 2, "a": 6})
    assert list(cfg.proportions) == ["a", "b"] and cfg.on_domain_exhausted == "wait"
    for bad in ({}, {"a": -1, "b": 2}, {"a": 0}):
        with pytest.raises(ValidationError):
            MixtureConfig(proportions=bad)
    with pytest.raises(ValidationError):
        MixtureConfig(proportions=W, on_domain_exhausted="skip")


def test_state_round_trip_through_json_continues_the_identical_sequence():
    whole = _draw(MixtureSampler(W, seed=5), 3000)
    first = MixtureSampler(W, seed=5)
    head = _draw(first, 1234)
    state = json.loads(json.dumps(first.state_dict()))
    second = MixtureSampler(W, seed=5)
    assert second.load_state_dict(state) is True
    assert head + _draw(second, 3000 - 1234) == whole


def test_undo_takes_back_exactly_one_draw():
    a, b = MixtureSampler(W, seed=2), MixtureSampler(W, seed=2)
    _draw(a, 10)
    _draw(b, 10)
    b.next()
    b.undo()
    assert a.state_dict() == b.state_dict() and _draw(a, 50) == _draw(b, 50)


def _rank_draws(m: RankMixture, n: int) -> list[tuple[int, int, str]]:
    """(step, position in the step, domain) of the rank's next n blocks."""
    out = []
    for _ in range(n):
        d = m.peek()
        out.append((m.step, m.step_positions()[0], d))
        m.served()
    return out


@pytest.mark.parametrize("world_size,batch_size", [(2, 4), (3, 5), (4, 1), (8, 2)])
def test_ranks_take_disjoint_shares_whose_union_is_the_single_rank_sequence(world_size, batch_size):
    steps = 200
    step_len = world_size * batch_size
    single = _draw(MixtureSampler(W, seed=9), steps * step_len)
    ranks = [RankMixture(MixtureSampler(W, seed=9), rank=r, world_size=world_size, batch_size=batch_size)
             for r in range(world_size)]  # fmt: skip
    draws = [_rank_draws(m, steps * batch_size) for m in ranks]
    by_position = {}
    for rank_draws in draws:
        for step, pos, d in rank_draws:
            assert (step, pos) not in by_position  # disjoint
            by_position[(step, pos)] = d
    assert [by_position[(i // step_len, i % step_len)] for i in range(len(single))] == single  # complete, in order
    states = [m.state_dict()["sampler"] for m in ranks]
    assert all(s == states[0] for s in states)  # at a batch boundary every rank holds the same sampler state
    n = steps * batch_size
    for m in ranks:  # and every rank's own blocks are mixed like the whole
        assert all(abs(m.delivered[d] - n * w) <= 0.01 * n + world_size for d, w in W.items()), m.delivered
    for rank_draws in draws:  # each batch holds every domain within one block of its share of the step
        for step in range(0, steps, 17):
            batch = Counter(d for s, _, d in rank_draws if s == step)
            whole = Counter(by_position[(step, i)] for i in range(step_len))
            assert all(abs(batch[d] - whole[d] / world_size) < 1 for d in W)


def test_rank_state_resumes_mid_run_exactly():
    whole = RankMixture(MixtureSampler(W, seed=1), rank=1, world_size=2, batch_size=3)
    expected = _rank_draws(whole, 60)
    part = RankMixture(MixtureSampler(W, seed=1), rank=1, world_size=2, batch_size=3)
    head = _rank_draws(part, 22)  # 7 batches and one block into the 8th
    state = json.loads(json.dumps(part.state_dict()))
    again = RankMixture(MixtureSampler(W, seed=1), rank=1, world_size=2, batch_size=3)
    assert again.load_state_dict(state) is True
    assert head + _rank_draws(again, 38) == expected


def test_a_state_taken_before_a_step_is_served_does_not_count_the_drawn_step():
    m = RankMixture(MixtureSampler(W, seed=1), rank=0, world_size=2, batch_size=4)
    before = m.state_dict()
    m.peek()  # draws the step (the block could not be served: a dry domain)
    assert m.state_dict() == before


def test_changed_proportions_keep_totals_and_hold_the_new_target_from_the_change():
    old = MixtureSampler(W, seed=0)
    _draw(old, 1000)
    state = old.state_dict()
    new_w = {"en_web": 0.2, "zh_web": 0.2, "code": 0.6}  # books left out, code up
    new = MixtureSampler(new_w, seed=0)
    assert new.load_state_dict(state) is False
    assert new.totals["books"] == state["totals"]["books"] and sum(new.since_change.values()) == 0
    seq = _draw(new, 2000)
    counts = Counter(seq)
    assert "books" not in counts and all(abs(counts[d] - 2000 * w) < 2 for d, w in new_w.items())
    assert new.totals["code"] == state["totals"]["code"] + counts["code"]


def test_renormalize_keeps_the_others_relative_proportions():
    s = MixtureSampler(W, seed=0)
    _draw(s, 100)
    s.exhaust("zh_web")
    counts = Counter(_draw(s, 7000))
    assert counts["zh_web"] == 0
    rest = {d: w / 0.7 for d, w in W.items() if d != "zh_web"}
    assert all(abs(counts[d] / 7000 - w) < 0.002 for d, w in rest.items())
    s.exhaust("en_web")
    s.exhaust("code")
    s.exhaust("books")
    assert s.next() is None


def test_zero_weight_domain_is_never_drawn():
    s = MixtureSampler({"a": 1.0, "b": 0.0}, seed=0)
    assert set(_draw(s, 100)) == {"a"}
