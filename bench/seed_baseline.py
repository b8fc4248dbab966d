"""The seed project's data path, rebuilt faithfully as the benchmark floor.

Producer: kafka-python, one JSON text line per message, one `send()` per line.
Consumer: kafka-python, and the training loop itself calls the DeepSeek tokenizer on every
message, buffers token ids in a Python list and cuts `[batch_size, seq_len]` int64 tensors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

import torch
from kafka import KafkaConsumer, KafkaProducer


def produce_lines(bootstrap: str, topic: str, lines: Iterable[str]) -> tuple[int, int, float]:
    """Send every line as {"text": line}; returns (messages, payload bytes, seconds)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        value_serializer=lambda v: json.dumps(v).encode(),
        acks="all",
    )
    n = nbytes = 0
    t0 = time.perf_counter()
    for line in lines:
        producer.send(topic, {"text": line})
        n += 1
        nbytes += len(line.encode())
    producer.flush()
    seconds = time.perf_counter() - t0
    producer.close()
    return n, nbytes, seconds


def consume_batches(
    bootstrap: str,
    topic: str,
    tokenizer,
    *,
    seq_len: int,
    batch_size: int,
    max_seconds: float,
    idle_ms: int = 5000,
) -> tuple[int, float]:
    """Run the seed's loop until the topic is drained or `max_seconds`; returns (delivered tokens, seconds).

    `tokenizer` is a transformers tokenizer; it is called per message as the seed did.
    """
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap.split(","),
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=idle_ms,
        value_deserializer=lambda b: json.loads(b.decode()),
    )
    eos = tokenizer.eos_token_id
    need = seq_len * batch_size
    buffer: list[int] = []
    delivered = 0
    t0 = None
    for msg in consumer:
        if t0 is None:
            t0 = time.perf_counter()  # clock starts at the first record: group join is not counted
        buffer.extend(tokenizer.encode(msg.value["text"], add_special_tokens=False))
        buffer.append(eos)
        while len(buffer) >= need:
            batch = torch.tensor(buffer[:need], dtype=torch.long).view(batch_size, seq_len)
            del buffer[:need]
            delivered += batch.numel()
        if time.perf_counter() - t0 > max_seconds:
            break
    seconds = time.perf_counter() - (t0 or time.perf_counter())
    consumer.close()
    return delivered, seconds
