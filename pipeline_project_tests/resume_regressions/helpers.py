"""A topic of identifiable blocks and a loader to read it, for the resume regressions.

Every block's first token names its domain, its second its batch and its third its index, so what was trained
is checked by content hash over the blocks delivered, never by the loader's own counts or trace.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from dataclasses import dataclass

import numpy as np

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.load.domain_source import make_loader
from pipeline_project.streaming.load.loader import LoaderConfig
from pipeline_project.streaming.load.mixture import MixtureConfig
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest

SEQ_LEN = 16
BATCH = 4
DOMAINS = {"en_web": 1, "code": 2, "books": 3}


@dataclass(frozen=True)
class Tok:
    name: str = "test-tok"
    hash: str = "test-hash"


def blocks(domain: str, batch: int, n: int) -> np.ndarray:
    b = np.full((n, SEQ_LEN), 7, dtype=np.uint32)
    b[:, 0], b[:, 1], b[:, 2] = DOMAINS[domain], batch, np.arange(n)
    return b


def new_topic(kafka: KafkaSettings, partitions: int = 4) -> str:
    topic = f"test-regress-{uuid.uuid4().hex[:10]}"
    ensure_topic(kafka.make_admin(), topic, partitions=partitions, replication_factor=3, min_insync_replicas=2)
    return topic


def append(kafka: KafkaSettings, topic: str, batch: int, per_domain: dict[str, int]) -> Counter:
    """Produce batch `batch` (`per_domain` blocks of each domain, in small pieces): the hashes it holds."""
    items = [(d, blocks(d, batch, n)[i : i + 5]) for d, n in per_domain.items() for i in range(0, n, 5)]
    request = ProduceRequest(topic=topic, ledger_key=f"b{batch}", content_hash=f"c{batch}", source=f"b{batch}",
                             seq_len=SEQ_LEN, tokenizer=Tok(), config=ProducerConfig(max_message_bytes=5 * SEQ_LEN * 4))  # fmt: skip
    produce_blocks(kafka, request, items)
    return Counter(digest(b) for _, bs in items for b in bs)


def digest(block: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(block, dtype=np.uint32).tobytes()).hexdigest()[:16]


def config(kafka: KafkaSettings, topic: str, *, rank: int = 0, world_size: int = 1, mixture: dict | None = None,
           **kw) -> LoaderConfig:  # fmt: skip
    mix = MixtureConfig(proportions=mixture, on_domain_exhausted="renormalize") if mixture else None
    base = dict(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=BATCH, rank=rank, world_size=world_size,
                idle_timeout_s=5.0, seed=3, mixture=mix, expected_tokenizer_hash="test-hash")  # fmt: skip
    return LoaderConfig(**{**base, **kw})


def read(cfg: LoaderConfig, state=None, max_batches: int | None = None) -> tuple[Counter, object]:
    """The hashes of the blocks a loader delivers (at most `max_batches` batches), and its state after them."""
    loader = make_loader(cfg)
    if state is not None:
        loader.load_state_dict(json.loads(json.dumps(state)))  # as a checkpoint stores it
    seen: Counter = Counter()
    for n, batch in enumerate(loader, 1):
        seen.update(digest(row.numpy().astype(np.uint32)) for row in batch)
        if max_batches is not None and n >= max_batches:
            break
    state = loader.state_dict()
    loader.close()
    return seen, state
