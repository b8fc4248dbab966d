import dagster as dg

from pipeline_project.sensors.checkpoint_trigger import checkpoint_trigger_sensor


def _produced(instance, tokens: int, reused: bool = False):
    instance.report_runless_asset_event(
        dg.AssetMaterialization("token_blocks", partition=None, metadata={"tokens": tokens, "reused_existing": reused})
    )


def _tick(instance):
    with dg.build_sensor_context(instance=instance) as ctx:
        return checkpoint_trigger_sensor(ctx)


def test_trains_once_enough_new_tokens_arrived_and_counts_from_the_last_checkpoint(monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    with dg.instance_for_test() as instance:
        _produced(instance, 600)
        _produced(instance, 5000, reused=True)  # a re-materialization that produced nothing new
        assert _tick(instance).run_requests == []
        _produced(instance, 500)
        first = _tick(instance).run_requests
        assert len(first) == 1
        assert _tick(instance).run_requests[0].run_key == first[0].run_key  # same data -> same run key

        instance.report_runless_asset_event(dg.AssetMaterialization("deepseek_checkpoint"))
        assert _tick(instance).run_requests == []
        _produced(instance, 1200)
        assert len(_tick(instance).run_requests) == 1
