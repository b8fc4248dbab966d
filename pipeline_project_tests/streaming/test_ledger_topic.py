"""`ensure_ledger_topic` reads the data topic's metadata first: a topic created a moment ago may still be unknown to
the broker that answers (KRaft spreads metadata to the brokers asynchronously), so it waits a bounded while; a topic
that stays missing is still a one-line error. Seen on the real stack: `streaming/test_ledger_index.py`'s recreated
ledger test failed at this read once in a full suite run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline_project.streaming.errors import TopicMissingError
from pipeline_project.streaming.kafka import topics
from pipeline_project.streaming.ledger import records


class _Admin:
    """Answers metadata for `topic` only from the `known_after`-th request on; records the ledger it is asked for."""

    def __init__(self, topic: str, known_after: int | None):
        self.topic, self.known_after, self.requests = topic, known_after, 0

    def list_topics(self, topic=None, timeout=None):
        self.requests += 1
        known = self.known_after is not None and self.requests > self.known_after
        parts = {p: SimpleNamespace(replicas=[0, 1, 2]) for p in range(2)}
        return SimpleNamespace(topics={self.topic: SimpleNamespace(error=None, partitions=parts)} if known else {})


def test_a_data_topic_the_answering_broker_does_not_know_yet_is_waited_for(monkeypatch):
    made = []
    monkeypatch.setattr(topics, "ensure_topic", lambda admin, name, **kw: made.append((name, kw["replication_factor"])))
    admin = _Admin("t", known_after=3)
    records.ensure_ledger_topic(admin, "t")
    assert admin.requests == 4 and made == [("t.ledger", 3)]


def test_a_data_topic_that_stays_missing_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(topics, "METADATA_PROPAGATION_S", 0.5)
    with pytest.raises(TopicMissingError, match="data topic 't' does not exist; create it with ensure_topic first"):
        records.ensure_ledger_topic(_Admin("t", known_after=None), "t")
