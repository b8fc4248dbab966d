"""The Dagster KafkaResource refuses, at resource initialization, configuration that would break exactly-once."""

import dagster as dg
import pytest

from pipeline_project.defs.resources.kafka import KafkaResource


@dg.asset
def needs_kafka(kafka: KafkaResource) -> None:
    kafka.settings()


@pytest.mark.parametrize(
    ("config", "line"),
    [
        ({"consumer_overrides": {"isolation.level": "read_uncommitted"}}, "consumer_overrides isolation.level="),
        ({"producer_overrides": {"acks": "1"}}, "producer_overrides acks="),
        ({"client_id": ""}, "client_id=''"),
    ],
)
def test_a_run_with_unsafe_kafka_config_fails_at_resource_init_with_one_line(config, line):
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:1", **config)
    result = dg.materialize([needs_kafka], resources={"kafka": kafka}, raise_on_error=False)
    assert not result.success
    (init,) = [e for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
    message = init.event_specific_data.error.message.strip()
    assert message.startswith("pipeline_project.streaming.kafka.policy.UnsafeKafkaConfigError: " + line), message
    assert "\n" not in message and "refused" in message


def test_a_safe_kafka_config_initializes():
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:1", consumer_overrides={"fetch.wait.max.ms": 10},
                          transactional_id_prefix="team-x")  # fmt: skip
    assert dg.materialize([needs_kafka], resources={"kafka": kafka}).success
