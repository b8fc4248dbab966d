"""A token topic that grew (`create_partitions` on the real brokers) is accepted by `ensure_topic` and `doctor`;
a topic with fewer partitions than configured stays an error."""

from __future__ import annotations

import pytest

from pipeline_project.ops.doctor import run_checks
from pipeline_project.streaming.errors import TopicLayoutMismatchError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project_tests.streaming.kafka_helpers import grow_topic, unique_topic

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def grown(stack):
    """A topic created with 2 partitions and grown to 3."""
    kafka = KafkaSettings.from_settings(stack)
    admin = kafka.make_admin()
    name = unique_topic("grown")
    ensure_topic(admin, name, partitions=2)
    grow_topic(kafka, name, 3)
    yield admin, name
    admin.delete_topics([name])[name].result(timeout=30)


def test_ensure_topic_accepts_more_partitions_than_configured(grown):
    admin, name = grown
    layout = ensure_topic(admin, name, partitions=2)
    assert layout.partitions == 3 and not layout.created


def test_ensure_topic_refuses_fewer_partitions_than_configured(grown):
    admin, name = grown
    with pytest.raises(TopicLayoutMismatchError, match="partitions expected at least 4, actual 3"):
        ensure_topic(admin, name, partitions=4)


def test_doctor_accepts_a_grown_topic_and_refuses_a_short_one(stack, grown):
    _, name = grown
    checks = {c.name: c for c in run_checks(stack, TopicSpec(name=name, partitions=2), only=("kafka",))}
    assert checks["kafka.topic"].ok and "3 partitions" in checks["kafka.topic"].detail, checks["kafka.topic"]
    short = {c.name: c for c in run_checks(stack, TopicSpec(name=name, partitions=4), only=("kafka",))}
    assert not short["kafka.topic"].ok and "3 partitions" in short["kafka.topic"].detail
