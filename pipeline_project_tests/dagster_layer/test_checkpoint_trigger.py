"""The checkpoint trigger counts from the data's truth: untrained tokens past the newest checkpoint's position."""

import dagster as dg

from pipeline_project.sensors.checkpoint_trigger import checkpoint_trigger_sensor, untrained_backlog, untrained_share


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


def _tick(instance):
    with dg.build_sensor_context(instance=instance) as ctx:
        return checkpoint_trigger_sensor(ctx)


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
