"""Failures the ingest assets survive, injected into the in-process stand-ins: a batch the token ledger already
holds with other content, and an S3 outage in the middle of publishing a batch."""

import dagster as dg
import pytest
from botocore.exceptions import EndpointConnectionError

from pipeline_project.defs.assets import cleaned, raw, token_blocks
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.assets.token_blocks import token_blocks as token_blocks_asset
from pipeline_project.defs.partitions import MIN_OUTAGE_COVERED_S, NETWORK_RETRY, batches
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import generate
from pipeline_project_tests.dagster_layer import standins
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client, MemoryS3Resource, standin_resources

INGEST = [raw_text, cleaned_shards, token_blocks_asset]
_FAILURES: dict[str, int] = {}  # store -> manifest writes still to fail (resources are re-created per step)


class _OutageS3Client(MemoryS3Client):
    def __init__(self, objects, store: str):
        super().__init__(objects)
        self.store = store

    def put_object(self, Bucket, Key, Body, **kw):
        if Key.endswith("/manifest.json") and _FAILURES.get(self.store, 0) > 0:
            _FAILURES[self.store] -= 1  # the shards are written, then S3 goes away
            raise EndpointConnectionError(endpoint_url="http://s3.invalid")
        return super().put_object(Bucket=Bucket, Key=Key, Body=Body, **kw)


class OutageS3Resource(MemoryS3Resource):
    def get_client(self) -> MemoryS3Client:
        return _OutageS3Client(standins._S3.setdefault(self.store, {}), self.store)


@pytest.fixture
def res(uid, layout):
    return standin_resources(uid, layout)


def _batch(instance, res, layout, seed: int) -> str:
    client = res["s3"].get_client()
    for f in generate(seed=seed, docs_per_language=4):
        client.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)
    with dg.build_sensor_context(instance=instance, resources={k: res[k] for k in ("s3", "layout")}) as ctx:
        batch = raw_s3_sensor(ctx).run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    return batch


def _materialize(instance, res, batch, selection):
    checks = dg.load_asset_checks_from_modules([raw, cleaned, token_blocks])
    return dg.materialize(
        [*selection, *checks], resources=res, partition_key=batch, instance=instance, raise_on_error=False
    )


def _objects(res, layout):
    return {k: v for (b, k), v in standins._S3[res["s3"].store].items() if b == layout.bucket}


def test_recleaning_a_produced_batch_with_other_content_is_refused_before_any_write(instance, res, layout):
    batch = _batch(instance, res, layout, seed=6)
    assert _materialize(instance, res, batch, INGEST).success
    ledger = standins._KAFKA[res["kafka"].store]["ledger"][(layout.topic.name, batch)]
    before = _objects(res, layout)

    ledger.content_hash = "0" * 64  # the topic holds this batch with content other than a re-clean gives
    result = _materialize(instance, res, batch, [cleaned_shards])
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "already in the topic" in failure.step_failure_data.user_failure_data.description
    assert _objects(res, layout) == before  # no shard, manifest, exclusion or dedup-index write
    assert instance.get_latest_materialization_event(cleaned_shards.key) is not None  # the first one stays


def test_recleaning_a_produced_batch_with_the_same_content_proceeds(instance, res, layout):
    batch = _batch(instance, res, layout, seed=7)
    assert _materialize(instance, res, batch, INGEST).success
    again = _materialize(instance, res, batch, [cleaned_shards, token_blocks_asset])
    assert again.success
    meta = {
        e.materialization.asset_key.to_user_string(): e.materialization.metadata
        for e in again.get_asset_materialization_events()
    }
    ledger = standins._KAFKA[res["kafka"].store]["ledger"][(layout.topic.name, batch)]
    assert meta["cleaned_shards"]["content_hash"].value == ledger.content_hash
    assert meta["token_blocks"]["reused_existing"].value is True


def test_an_s3_outage_mid_publish_records_nothing_and_the_retry_succeeds(instance, res, layout, monkeypatch):
    import dagster._core.definitions.policy as policy

    monkeypatch.setattr(policy, "random", lambda: 0.0)  # the shortest waits the jitter allows: 0 s, then 8 s
    res = {**res, "s3": OutageS3Resource(store=res["s3"].store)}
    batch = _batch(instance, res, layout, seed=8)
    _FAILURES[res["s3"].store] = 1
    result = _materialize(instance, res, batch, INGEST)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    restarts = [e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]
    assert [e.step_key for e in restarts] == ["cleaned_shards"]
    mats = [e for e in result.get_asset_materialization_events() if e.materialization.asset_key == cleaned_shards.key]
    assert len(mats) == 1  # the failed attempt recorded nothing; the retry recorded the whole batch
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["cleaned_counts_add_up"] and checks["cleaned_shards_readable"]


@pytest.mark.parametrize("draw", [0.0, 0.999999])
def test_the_step_retry_budget_covers_a_two_minute_outage(draw, monkeypatch):
    """Dagster's own delay computation, at both ends of the jitter: the last retry starts >= 120 s after the
    first failure, and a failure that does not go away gives up within 5 minutes."""
    import dagster._core.definitions.policy as policy

    monkeypatch.setattr(policy, "random", lambda: draw)
    waited = sum(NETWORK_RETRY.calculate_delay(n) for n in range(1, NETWORK_RETRY.max_retries + 1))
    assert MIN_OUTAGE_COVERED_S <= 120 <= waited <= 300
