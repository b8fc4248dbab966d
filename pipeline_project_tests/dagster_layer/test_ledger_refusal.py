"""`cleaned_shards` against the real Kafka ledger (S3 and the dedup index in process): a batch that `token_blocks`
has partly produced (a progress record, no completion record yet) and whose re-clean gives other content is
refused before anything is published; after `ledger retire`, the re-clean goes through."""

import numpy as np
import pytest

from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.ledger.records import read_ledger_records
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project_tests.dagster_layer.standins import standin_resources
from pipeline_project_tests.dagster_layer.test_ingest_failures import _batch, _materialize, _objects

pytestmark = pytest.mark.stack

SEQ = 64


class _Tok:
    name = "unit-tok"
    hash = "deadbeef"


def _interrupted(n_blocks: int):
    blocks = np.random.default_rng(5).integers(0, 1000, size=(n_blocks, SEQ), dtype=np.uint32)
    for i in range(0, n_blocks, 5):
        if i >= n_blocks // 2:
            raise OSError("token_blocks was killed")
        yield blocks[i : i + 5]


def test_recleaning_a_partly_produced_batch_into_other_content_is_refused_until_retired(
    stack, instance, uid, layout, pg_url
):
    kafka = KafkaResource(bootstrap_servers=stack.kafka_bootstrap, ledger_index_url=pg_url)
    res = {**standin_resources(uid, layout), "kafka": kafka}
    settings = kafka.settings()
    ensure_topic(settings.make_admin(), layout.topic.name)
    batch = _batch(instance, res, layout, seed=9)
    assert _materialize(instance, res, batch, [raw_text, cleaned_shards]).success

    # token_blocks committed part of the batch with content the input no longer cleans to, then died
    config = ProducerConfig(max_message_bytes=SEQ * 4 * 5, transaction_max_bytes=SEQ * 4 * 5, statistics_interval_ms=0)
    with pytest.raises(OSError, match="killed"):
        produce_blocks(
            settings,
            ProduceRequest(
                topic=layout.topic.name,
                ledger_key=batch,
                content_hash="0" * 64,
                source=batch,
                seq_len=SEQ,
                tokenizer=_Tok,
                config=config,
            ),
            _interrupted(40),
        )
    assert batch in read_ledger_records(settings, layout.topic.name, keys=[batch]).progress
    before = _objects(res, layout)

    result = _materialize(instance, res, batch, [cleaned_shards])
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    description = failure.step_failure_data.user_failure_data.description
    assert "partly produced" in description and f"pipeline-project ledger retire {batch}" in description
    assert _objects(res, layout) == before  # no shard, manifest, exclusion or dedup-index write

    from pipeline_project.streaming.ledger.retire import retire_entry  # here: the refusal above is older than it

    retire_entry(settings, layout.topic.name, batch, "the input changed upstream", index=None)
    assert _materialize(instance, res, batch, [cleaned_shards]).success
