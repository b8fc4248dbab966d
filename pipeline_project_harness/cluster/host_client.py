"""A client the cluster tests run on a host (`cluster exec trainer-1 -- python -m ...host_client CMD`).

It knows nothing of the cluster: every address comes from `Settings()`, i.e. the environment `exec` gives it.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline_project.settings import Settings
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.topics import ensure_topic


def _kafka() -> KafkaSettings:
    return KafkaSettings.from_settings(Settings(), client_id="cluster-test")


def topic(name: str) -> dict:
    layout = ensure_topic(AdminClient(_kafka().admin_config()), name, partitions=3, replication_factor=3)
    return {"partitions": layout.partitions, "replication_factor": layout.replication_factor, **layout.config}


def produce(name: str, count: int, tag: str, timeout: float, ensure: bool) -> dict:
    """`count` messages with acks=all (the project's producer defaults); `ensure`: make the topic first if missing."""
    layout = topic(name) if ensure else None
    producer = Producer({**_kafka().producer_config(), "message.timeout.ms": int(timeout * 1000)})
    errors: list[str] = []
    delivered: list[tuple[int, int]] = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset()))

    started = time.monotonic()
    for i in range(count):
        producer.produce(name, key=str(i).encode(), value=f"{tag}-{i}".encode(), on_delivery=report)
    producer.flush(timeout + 10)
    return {
        "topic": layout,
        "acks": producer_acks(),
        "delivered": len(delivered),
        "errors": errors,
        "seconds": round(time.monotonic() - started, 1),
    }


def producer_acks() -> str:
    return str(_kafka().producer_config().get("acks", "all"))


def consume(name: str, partitions: int, timeout: float) -> dict:
    """Every committed message of the topic, from the start of each partition."""
    consumer = Consumer(_kafka().consumer_config())
    try:
        ends = {}
        for p in range(partitions):
            ends[p] = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=timeout)[1]
        consumer.assign([TopicPartition(name, p, 0) for p in range(partitions)])
        values: list[str] = []
        deadline = time.monotonic() + timeout
        while sum(ends.values()) > len(values) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=1.0):
                if msg.error() is None:
                    values.append(msg.value().decode())
    finally:
        consumer.close()
    return {"values": sorted(values), "end_offsets": ends}


def s3_roundtrip(key: str, body: str) -> dict:
    settings = Settings()
    client = settings.s3_client()
    client.put_object(Bucket=settings.bucket, Key=key, Body=body.encode())
    got = client.get_object(Bucket=settings.bucket, Key=key)["Body"].read().decode()
    return {"endpoint": settings.s3_endpoint, "body": got}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("name")
    p.add_argument("count", type=int)
    p.add_argument("--tag", default="m")
    p.add_argument("--timeout", type=float, default=60.0)
    # `ensure_topic` asks librdkafka's idea of the controller, which can be a cut broker: it then times out
    p.add_argument("--existing", action="store_true", help="the topic exists: skip ensure_topic")
    c = sub.add_parser("consume")
    c.add_argument("name")
    c.add_argument("--partitions", type=int, default=3)
    c.add_argument("--timeout", type=float, default=30.0)
    s = sub.add_parser("s3")
    s.add_argument("key")
    s.add_argument("body")
    args = parser.parse_args(argv)
    if args.cmd == "produce":
        out = produce(args.name, args.count, args.tag, args.timeout, ensure=not args.existing)
    elif args.cmd == "consume":
        out = consume(args.name, args.partitions, args.timeout)
    else:
        out = s3_roundtrip(args.key, args.body)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
