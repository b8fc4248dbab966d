"""The checkpoint trigger counts from the data's truth: untrained tokens past the newest checkpoint's position."""

import random

import dagster as dg

from pipeline_project.defs.assets.backlog import default_store, untrained_backlog
from pipeline_project.defs.partitions import untrained_share
from pipeline_project.defs.resources import training_trigger
from pipeline_project.defs.resources.trainer import trainer_from_settings
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.defs.sensors.trigger_policy import TriggerCursor
from pipeline_project.settings import Settings


def _produced(instance, batch: str, tokens: int, ranges: dict, reused: bool = False):
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            "token_blocks",
            partition=batch,
            metadata={"tokens": tokens, "offset_ranges": ranges, "reused_existing": reused},
        )
    )


def _checkpoint(instance, end_position: dict):
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            "deepseek_checkpoint", metadata={"end_position": dg.MetadataValue.json(end_position), "steps": 1}
        )
    )


def _tick(instance, cursor=None):
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"trigger": training_trigger(Settings()), "trainer": trainer_from_settings(Settings())},
    ) as ctx:
        return checkpoint_trigger_sensor(ctx)


def _pending(instance, cursor: str) -> list[str]:
    """The batches the cursor's backlog scope holds as not wholly trained (rows in the stand-in store)."""
    return sorted(default_store(instance).batches(TriggerCursor.from_cursor(cursor).backlog.scope, "token-blocks"))


def _count_token_blocks_reads(instance, monkeypatch) -> list[int]:
    """A list that holds, per call, how many token_blocks materializations the instance returned."""
    counts: list[int] = []
    real = instance.fetch_materializations

    def counting(records_filter, *args, **kwargs):
        result = real(records_filter, *args, **kwargs)
        key = getattr(records_filter, "asset_key", records_filter)
        if key == dg.AssetKey("token_blocks"):
            counts.append(len(result.records))
        return result

    monkeypatch.setattr(instance, "fetch_materializations", counting)
    return counts


def test_trains_once_enough_untrained_tokens_arrived_with_one_run_key_per_backlog(monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 600, {"0": [0, 5]})
        assert _tick(instance).run_requests == []
        _produced(instance, "b2", 500, {"1": [0, 4]})
        first = _tick(instance).run_requests
        assert len(first) == 1
        assert _tick(instance).run_requests[0].run_key == first[0].run_key  # same data -> same run key

        _checkpoint(instance, {"0": {"offset": 6, "block": 0}, "1": {"offset": 5, "block": 0}})
        assert _tick(instance).run_requests == []
        _produced(instance, "b3", 1200, {"0": [6, 11]})
        again = _tick(instance).run_requests
        assert len(again) == 1 and again[0].run_key != first[0].run_key


def test_a_retry_that_reused_its_ledger_entry_is_counted(monkeypatch):
    """The first attempt committed to Kafka, then failed (say, MLflow); the retry reports reused_existing."""
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 1500, {"0": [0, 9], "1": [0, 4]}, reused=True)
        assert untrained_backlog(instance).tokens == 1500
        assert len(_tick(instance).run_requests) == 1


def test_backlog_left_by_a_max_steps_cap_is_counted_again(monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 4000, {"0": [0, 9], "1": [0, 9]})
        # a capped checkpoint trained partition 0 to offset 5 and partition 1 to offset 2 (block 1 of message 2)
        _checkpoint(instance, {"0": {"offset": 5, "block": 0}, "1": {"offset": 2, "block": 1}})
        backlog = untrained_backlog(instance)
        assert backlog.tokens == round(4000 * (5 + 8) / 20) and backlog.batches == 1
        assert len(_tick(instance).run_requests) == 1


def test_the_newest_materialization_of_a_batch_counts_once(monkeypatch):
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 800, {"0": [0, 7]})
        _produced(instance, "b1", 800, {"0": [0, 7]}, reused=True)  # re-materialized: the same blocks
        assert untrained_backlog(instance).tokens == 800
        _checkpoint(instance, {"0": {"offset": 8, "block": 0}})
        assert untrained_backlog(instance).tokens == 0
        _produced(instance, "b1", 800, {"0": [0, 7]}, reused=True)  # after the checkpoint: still trained
        assert untrained_backlog(instance).tokens == 0


def test_untrained_share_of_offset_ranges():
    assert untrained_share({"0": [0, 9]}, {}) == 1.0  # no position: all of it
    assert untrained_share({"0": [0, 9]}, {"0": {"offset": 10}}) == 0.0
    assert untrained_share({"0": [10, 19], "1": [0, 9]}, {"0": {"offset": 15}, "1": {"offset": 0}}) == 0.75
    assert untrained_share({}, {"0": {"offset": 3}}) == 0.0  # a batch of no blocks


def test_a_tick_reads_the_materializations_since_the_last_tick_and_keeps_only_untrained_batches(monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000000")
    with dg.instance_for_test() as instance:
        for i in range(30):
            _produced(instance, f"b{i}", 100, {"0": [10 * i, 10 * i + 9]})
        _checkpoint(instance, {"0": {"offset": 250, "block": 0}})  # b0..b24 trained
        reads = _count_token_blocks_reads(instance, monkeypatch)
        first = _tick(instance)
        assert sum(reads) == 30 and "500 untrained tokens" in first.skip_reason.skip_message
        assert _pending(instance, first.cursor) == [f"b{i}" for i in range(25, 30)]  # the backlog, not history
        assert len(first.cursor) < 200  # the cursor names the rows: a few numbers, whatever the backlog

        reads.clear()
        _produced(instance, "b30", 100, {"0": [300, 309]})
        second = _tick(instance, first.cursor)
        assert sum(reads) == 1 and "600 untrained tokens" in second.skip_reason.skip_message
        assert len(_pending(instance, second.cursor)) == 6


def test_a_checkpoint_behind_the_pruned_position_counts_every_batch_again(monkeypatch):
    """A new lineage trained from offset 0 (or a reset): batches pruned as trained are untrained again."""
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000000")
    with dg.instance_for_test() as instance:
        for i in range(4):
            _produced(instance, f"b{i}", 100, {"0": [10 * i, 10 * i + 9]})
        _checkpoint(instance, {"0": {"offset": 40, "block": 0}})
        cursor = _tick(instance).cursor
        assert _pending(instance, cursor) == []
        _checkpoint(instance, {"0": {"offset": 15, "block": 0}})
        assert "250 untrained tokens" in _tick(instance, cursor).skip_reason.skip_message


def test_the_carried_backlog_equals_the_one_counted_from_every_materialization(monkeypatch):
    """Random batches (some re-materialized, some without ranges), checkpoints that move forward, and now and then
    one that moves back: after every event the tick's backlog, carried in its cursor, is the full count."""
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000000000")
    rng = random.Random(7)
    with dg.instance_for_test() as instance:
        ends = {"0": 0, "1": 0}
        position = {"0": 0, "1": 0}
        cursor = None
        for step in range(120):
            event = rng.random()
            if event < 0.6:
                ranges = {}
                for p in ends:
                    n = rng.randrange(0, 4)
                    if n:
                        ranges[p] = [ends[p], ends[p] + n - 1]
                        ends[p] += n
                batch = f"b{rng.randrange(0, 40)}"
                _produced(instance, batch, rng.randrange(1, 500), ranges if rng.random() < 0.9 else None)
            elif event < 0.9:
                position = {p: min(ends[p], position[p] + rng.randrange(0, 6)) for p in ends}
                _checkpoint(instance, {p: {"offset": o, "block": 0} for p, o in position.items()})
            else:
                position = {p: rng.randrange(0, ends[p] + 1) for p in ends}  # back: another lineage
                _checkpoint(instance, {p: {"offset": o, "block": 0} for p, o in position.items()})
            result = _tick(instance, cursor)
            cursor = result.cursor
            carried = TriggerCursor.from_cursor(cursor).backlog
            full = untrained_backlog(instance)
            assert f"{full.tokens} untrained tokens" in result.skip_reason.skip_message, (
                step,
                result.skip_reason,
                full,
            )
            assert carried.after == full.newest_id


def test_a_training_run_lists_the_untrained_batches_of_its_topic_from_the_previous_runs_count(monkeypatch):
    from pipeline_project.defs.assets.checkpoint import untrained_topic_batches

    with dg.instance_for_test() as instance:
        for i in range(20):
            _produced(instance, f"b{i:02d}", 100, {"0": [10 * i, 10 * i + 9]})
        _checkpoint(instance, {"0": {"offset": 185, "block": 0}})  # b00..b17 trained, b18 half
        reads = _count_token_blocks_reads(instance, monkeypatch)
        assert untrained_topic_batches(instance, "token-blocks") == {"b18": {"0": [180, 189]}, "b19": {"0": [190, 199]}}
        assert sum(reads) == 20
        reads.clear()
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                "token_blocks",
                partition="other",
                metadata={"tokens": 5, "offset_ranges": {"0": [0, 0]}, "topic": "another-topic"},
            )
        )
        _checkpoint(instance, {"0": {"offset": 190, "block": 0}})
        assert untrained_topic_batches(instance, "token-blocks") == {"b19": {"0": [190, 199]}}
        assert sum(reads) == 1  # the one materialization since the previous run's count


def test_a_cursor_of_the_earlier_format_starts_its_backlog_over_and_a_garbled_one_starts_over():
    """The cursor once carried every untrained batch; such a cursor keeps its failure streak and counts anew."""
    earlier = '{"backlog":{"after":7,"checkpoint_id":3,"pending":{"b1":[7,100,null,null]},"position":null},'
    state = TriggerCursor.from_cursor(earlier + '"failed_run":"r1","failures":2,"retry_at":5.0}')
    assert state.failures == 2 and state.backlog.after == 0 and state.backlog.scope
    assert TriggerCursor.from_cursor(state.to_cursor()) == state
    assert TriggerCursor.from_cursor("{not json").failures == 0


def test_a_checkpoint_of_another_topic_does_not_mark_this_topics_batches_trained():
    """Two topics in one instance: the newest checkpoint's position is a position in its own topic only."""
    from pipeline_project.defs.assets.checkpoint import untrained_topic_batches

    with dg.instance_for_test() as instance:
        for batch, topic in (("a1", "topic-a"), ("b1", "topic-b")):
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    "token_blocks",
                    partition=batch,
                    metadata={"tokens": 100, "offset_ranges": {"0": [0, 9]}, "topic": topic},
                )
            )
        instance.report_runless_asset_event(  # topic-a trained to its end
            dg.AssetMaterialization(
                "deepseek_checkpoint",
                metadata={"end_position": dg.MetadataValue.json({"0": {"offset": 10, "block": 0}}), "topic": "topic-a"},
            )
        )
        assert untrained_topic_batches(instance, "topic-a") == {}
        assert untrained_topic_batches(instance, "topic-b") == {"b1": {"0": [0, 9]}}
        assert untrained_backlog(instance).tokens == 0  # nor counted for a trigger of topic-a's checkpoint


def test_a_tick_with_every_batch_to_read_spreads_the_reading_over_ticks(monkeypatch):
    """A first tick (a new lineage, a reset) at 10^6 batches read every materialization in one tick, minutes past
    Dagster's 60 s limit. Under a budget it reads a page at a time and says so; the count it reaches is the whole
    one's."""
    import pipeline_project.defs.sensors.checkpoint_trigger as trigger_module
    from pipeline_project.defs.sensors.trigger_policy import TriggerCursor

    monkeypatch.setattr(trigger_module, "TICK_BUDGET_S", 0.0)  # one page (500 materializations) per tick
    with dg.instance_for_test() as instance:
        for i in range(1_200):
            _produced(instance, f"b{i:04d}", 10, {"0": [i, i]})
        cursor, reasons = None, []
        for _ in range(3):
            result = _tick(instance, cursor)
            cursor = result.cursor
            reasons.append(result.skip_reason.skip_message if result.skip_reason else "requested")
        assert [r.startswith("counting the untrained backlog: ") for r in reasons] == [True, True, False]
        assert "500 batches (5000 tokens) so far" in reasons[0]
        carried = TriggerCursor.from_cursor(cursor).backlog
        assert len(_pending(instance, cursor)) == 1_200 and carried.after == untrained_backlog(instance).newest_id
