"""The backlog store: the untrained batches are rows, judged again only where the checkpoint moved past them and
summed in the database; the trigger's cursor names them and stays a few numbers. The same cases run against the
SQLite stand-in (fast tier) and the stack's PostgreSQL (`pg_url`: integration tier)."""

import random
import time

import dagster as dg

from pipeline_project.defs.assets.backlog import Head, untrained_backlog
from pipeline_project.defs.assets.backlog.store import (
    STALE_S,
    PostgresBacklogStore,
    Row,
    SqliteBacklogStore,
)
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.defs.resources.trigger import TrainingTrigger
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.defs.sensors.trigger_policy import TriggerCursor


def _row(batch, sid, tokens, share=1.0, topic=None, ranges=None):
    return Row(batch, sid, tokens, share, topic, ranges)


def _store_cases(store):
    scope = store.new_scope()
    head = Head(0, None, None)
    assert store.header(scope) is None
    store.reset(scope, head)
    assert store.header(scope) == (0, head)
    store.put(scope, [_row("b1", 5, 100, ranges={"0": [0, 9]}), _row("b2", 6, 50, topic="t")], after=6)
    store.put(scope, [_row("b1", 3, 999)], after=6)  # an older materialization read again: no change
    assert store.totals(scope, head) == (150.0, 2) and store.totals(scope, head, 5) == (50.0, 1)
    assert store.totals(scope, Head(0, None, "other")) == (100.0, 1)  # b2 is another topic's
    store.put(scope, [_row("b1", 7, 100, share=0.0)], after=7)  # newer and trained: gone
    assert store.batches(scope, "t") == {"b2": {}} and store.header(scope)[0] == 7
    store.put(scope, [_row(f"c{i}", 10 + i, 10, ranges={"0": [10 * i, 10 * i + 9]}) for i in range(5)], after=14)
    moved = Head(3, {"0": {"offset": 25, "block": 0}}, None)
    assert sorted(r.batch for r in store.candidates(scope, moved)) == ["c0", "c1", "c2"]
    store.judge(scope, {"c0": 0.0, "c1": 0.0, "c2": 0.5}, moved)
    assert store.header(scope) == (14, moved) and store.totals(scope, moved) == (50.0 + 5 + 20, 4)
    other = store.new_scope()
    store.reset(other, head)
    store.put(other, [_row("x", 1, 1)], after=1)
    assert store.size(other) == 1 and store.size(scope) == 4  # scopes do not see each other
    store.drop(other)
    assert store.header(other) is None and store.size(other) == 0
    store.drop(scope)


def test_the_stand_in_store_keeps_newest_rows_judges_candidates_and_sums(tmp_path):
    store = SqliteBacklogStore(tmp_path)
    try:
        _store_cases(store)
    finally:
        store.close()


def test_the_postgres_store_keeps_newest_rows_judges_candidates_and_sums(pg_url):
    store = PostgresBacklogStore(pg_url)
    try:
        _store_cases(store)
    finally:
        store.close()


def test_a_reset_drops_the_scopes_no_count_touched_for_a_month(tmp_path, monkeypatch):
    store = SqliteBacklogStore(tmp_path)
    old = store.new_scope()
    store.reset(old, Head())
    store.put(old, [_row("b1", 1, 10)], after=1)
    later = time.time() + STALE_S + 1
    monkeypatch.setattr(time, "time", lambda: later)
    store.reset(store.new_scope(), Head())
    assert store.header(old) is None and store.size(old) == 0
    store.close()


def _produced(instance, batch, tokens, ranges):
    instance.report_runless_asset_event(
        dg.AssetMaterialization("token_blocks", partition=batch, metadata={"tokens": tokens, "offset_ranges": ranges})
    )


def _checkpoint(instance, offsets: dict):
    position = {p: {"offset": o, "block": 0} for p, o in offsets.items()}
    instance.report_runless_asset_event(
        dg.AssetMaterialization("deepseek_checkpoint", metadata={"end_position": dg.MetadataValue.json(position)})
    )


def _tick(instance, url, cursor=None):
    trigger = TrainingTrigger(min_new_tokens=10**12, backlog_url=url)
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"trigger": trigger, "trainer": TrainerResource()}
    ) as ctx:
        return checkpoint_trigger_sensor(ctx)


def _carried_equals_full(instance, url, store):
    """Random batches (some re-materialized), checkpoints forward and now and then back: after every event the
    tick's count, its batches in `store`, equals a count from nothing; the cursor stays a few numbers."""
    rng = random.Random(11)
    ends, position, cursor = {"0": 0, "1": 0}, {"0": 0, "1": 0}, None
    for step in range(60):
        event = rng.random()
        if event < 0.6:
            ranges = {p: [ends[p], ends[p] + n - 1] for p in ends if (n := rng.randrange(0, 4))}
            for p, (_first, last) in ranges.items():
                ends[p] = last + 1
            _produced(instance, f"b{rng.randrange(0, 25)}", rng.randrange(1, 500), ranges)
        else:
            back = event > 0.9
            position = {p: rng.randrange(0, ends[p] + 1) if back else min(ends[p], o + rng.randrange(0, 6))
                        for p, o in position.items()}  # fmt: skip
            _checkpoint(instance, position)
        result = _tick(instance, url, cursor)
        cursor = result.cursor
        full = untrained_backlog(instance, store=store)
        assert f"{full.tokens} untrained tokens" in result.skip_reason.skip_message, (step, result.skip_reason)
        assert TriggerCursor.from_cursor(cursor).backlog.after == full.newest_id and len(cursor) < 200


def test_the_trigger_carries_its_backlog_in_postgres(pg_url):
    store = PostgresBacklogStore(pg_url)
    try:
        with dg.instance_for_test() as instance:
            for i in range(30):
                _produced(instance, f"b{i:02d}", 100, {"0": [10 * i, 10 * i + 9]})
            _checkpoint(instance, {"0": 250})
            first = _tick(instance, pg_url)
            assert "500 untrained tokens" in first.skip_reason.skip_message
            scope = TriggerCursor.from_cursor(first.cursor).backlog.scope
            assert sorted(store.batches(scope, "token-blocks")) == [f"b{i}" for i in range(25, 30)]
            _carried_equals_full(instance, pg_url, store)
    finally:
        store.close()


def test_the_trigger_carries_its_backlog_in_the_stand_in():
    with dg.instance_for_test() as instance:
        store = SqliteBacklogStore(instance.root_directory)
        _carried_equals_full(instance, "", store)
        store.close()
