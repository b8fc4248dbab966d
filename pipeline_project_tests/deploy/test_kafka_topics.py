"""The KafkaTopic resources in deploy/k8s/kafka/topics.yaml equal what the code's `ensure_topic` demands.

The expected layouts come from the project's own code, not from copies: `PipelineLayout`'s defaults (its
`topic_config()` included) go through the real `ensure_topic` (the token topic, as the `token_blocks` asset
calls it), the real `ensure_ledger_topic` (its ledger), the real `ensure_retractions_topic` (its retractions,
`<topic>.retractions`) and the loader's real `DeadLetterSink` (its dead-letter topic, `<topic>.dlq`), and the test
records the NewTopic they would create.
So a change to the partitions, the replication, min.insync.replicas, retention or compaction in the code fails
this test until the YAML follows.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.streaming.kafka import topics
from pipeline_project.streaming.ledger import records as ledger
from pipeline_project.streaming.load.config import dead_letter_topic_for
from pipeline_project.streaming.load.dead_letters import DeadLetterSink
from pipeline_project.streaming.retractions import topic as retractions
from pipeline_project_tests.deploy.helpers import K8S, yaml_docs


class _Created(Exception):
    """Raised by the recording NewTopic, so ensure_topic stops before it talks to a broker."""

    def __init__(self, name: str, num_partitions: int, replication_factor: int, config: dict):
        super().__init__(name)
        self.layout = {"partitions": num_partitions, "replicas": replication_factor, "config": dict(config)}


def _record_new_topic(name, num_partitions, replication_factor, config=None, **_):
    raise _Created(name, num_partitions, replication_factor, config or {})


class _NoTopicYet:
    """An AdminClient for which the topic does not exist yet, so ensure_topic goes on to create it."""

    def describe_topics(self, collection, request_timeout=None):
        future = Future()
        future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
        return {name: future for name in collection.topic_names}


class _DataTopicMetadata(_NoTopicYet):
    """Just enough AdminClient for `ensure_ledger_topic` to read the data topic's replication factor."""

    def __init__(self, topic: str, partitions: int, replicas: int):
        parts = {p: SimpleNamespace(replicas=list(range(replicas)), leader=0) for p in range(partitions)}
        self.topics = {topic: SimpleNamespace(error=None, partitions=parts)}

    def list_topics(self, topic=None, timeout=None):
        return self


def _demanded(monkeypatch) -> dict[str, dict]:
    monkeypatch.setattr(topics, "NewTopic", _record_new_topic)
    layout = PipelineLayout()
    demanded = {}
    with pytest.raises(_Created) as created:
        # the token_blocks asset's call (assets/token_blocks.py), through KafkaResource.ensure_topic
        topics.ensure_topic(
            _NoTopicYet(),
            layout.topic.name,
            partitions=layout.topic.partitions,
            replication_factor=layout.topic.replication_factor,
            min_insync_replicas=layout.topic.min_insync_replicas,
            config=layout.topic_spec.topic_config(),
        )
    demanded[layout.topic.name] = created.value.layout
    admin = _DataTopicMetadata(layout.topic.name, layout.topic.partitions, layout.topic.replication_factor)
    with pytest.raises(_Created) as created:
        ledger.ensure_ledger_topic(admin, layout.topic.name)
    demanded[ledger.ledger_topic(layout.topic.name)] = created.value.layout
    with pytest.raises(_Created) as created:
        retractions.ensure_retractions_topic(admin, layout.topic.name)  # what write_retraction does first
    demanded[retractions.retractions_topic(layout.topic.name)] = created.value.layout
    dlq = dead_letter_topic_for(layout.topic.name)
    kafka = SimpleNamespace(make_admin=lambda: admin)
    with pytest.raises(_Created) as created:
        DeadLetterSink(kafka, dlq, source_topic=layout.topic.name)._open()  # what its first dead letter does
    demanded[dlq] = created.value.layout
    return demanded


def _declared(path=K8S / "kafka" / "topics.yaml") -> dict[str, dict]:
    declared = {}
    for doc in yaml_docs(path):
        assert doc["kind"] == "KafkaTopic"
        spec = doc["spec"]
        name = spec.get("topicName", doc["metadata"]["name"])
        config = {k: str(v) for k, v in (spec.get("config") or {}).items()}
        declared[name] = {"partitions": spec["partitions"], "replicas": spec["replicas"], "config": config}
    return declared


def test_kafka_topics_equal_what_ensure_topic_demands(monkeypatch):
    demanded = _demanded(monkeypatch)
    # the default topic names, all declared
    assert set(demanded) == {"token-blocks", "token-blocks.ledger", "token-blocks.retractions", "token-blocks.dlq"}
    assert _declared() == demanded


def test_the_tiered_cluster_declares_the_same_topics(monkeypatch):
    demanded = _demanded(monkeypatch)
    tiered = _declared(K8S / "kafka" / "tiered" / "topics.yaml")
    assert set(tiered) == set(demanded)
    assert {k: v for k, v in tiered.items() if k != "token-blocks"} == {
        k: v for k, v in demanded.items() if k != "token-blocks"
    }


def test_the_dead_letter_topic_keeps_each_letter_once(monkeypatch):
    dlq = _demanded(monkeypatch)["token-blocks.dlq"]
    assert dlq["partitions"] == 1 and dlq["config"]["cleanup.policy"] == "compact"


def test_the_retractions_topic_has_the_ledger_topics_layout(monkeypatch):
    """Issue 40: compacted, one partition, replicated like the data topic, as the ledger topic."""
    demanded = _demanded(monkeypatch)
    assert demanded["token-blocks.retractions"] == demanded["token-blocks.ledger"]
    assert demanded["token-blocks.retractions"]["config"]["cleanup.policy"] == "compact"
    declared = _declared()
    assert declared["token-blocks.retractions"] == declared["token-blocks.ledger"]


def test_the_ledger_is_compacted_and_the_token_topic_keeps_its_blocks(monkeypatch):
    demanded = _demanded(monkeypatch)
    assert demanded["token-blocks.ledger"]["config"]["cleanup.policy"] == "compact"
    assert demanded["token-blocks.ledger"]["partitions"] == 1
    token = demanded["token-blocks"]["config"]
    assert token.get("cleanup.policy", "delete") == "delete"
    # checkpoints hold offsets into the topic: nothing may expire under them
    assert token.get("retention.ms") == token.get("retention.bytes") == str(topics.INFINITE)
