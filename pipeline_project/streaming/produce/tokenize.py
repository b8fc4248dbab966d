"""Documents -> DeepSeek tokenizer (batch API) -> per-domain block packing (FIM for code when on) ->
`produce_blocks`, with the time of each stage measured."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.spans import SpanRecorder
from pipeline_project.streaming.ledger.records import ProduceReport
from pipeline_project.streaming.produce.fim import FimApplier, FimSentinels
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.produce.prefetch import prefetch_batches
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import Document, Instruments, ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.staging import StreamItem


class StageTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"read": 0.0, "tokenize": 0.0, "pack": 0.0}


def timed_blocks(
    texts: Iterable[Document],
    tokenizer: Any,
    packer: DomainPackers,
    config: ProducerConfig,
    timer: StageTimer,
    spans: SpanRecorder | None = None,
) -> Iterator[StreamItem]:
    batches = prefetch_batches(texts, config.text_batch_docs, config.prefetch_batches)
    fim = FimApplier(config.fim, FimSentinels.of(tokenizer)) if config.fim.active else None
    if fim is not None:
        packer.fim_docs = fim.counts
    weighted = bool(config.rehydration)  # documents may carry a weight: tokenized once, packed that many times
    if weighted:
        packer.rehydrated = {}
    tagged = False
    try:
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            t1 = time.perf_counter()
            timer.seconds["read"] += t1 - t0  # time spent waiting on the reader
            if batch is None:
                break
            domains = [None if isinstance(d, str) else d[0] for d in batch]
            bodies = [d if isinstance(d, str) else d[1] for d in batch]
            repeats = _repeats(batch, weighted)
            ids = fim.encode(bodies, domains, tokenizer.encode_batch) if fim else tokenizer.encode_batch(bodies)
            t2 = time.perf_counter()
            if spans is not None:
                spans.note(ids, domains, fim.last_chosen if fim else None, repeats)
            out = packer.add(ids, domains, repeats)
            tagged = tagged or any(d is not None for d in domains)
            timer.seconds["tokenize"] += t2 - t1
            timer.seconds["pack"] += time.perf_counter() - t2
            yield from (item if tagged else item[1] for item in out)
    finally:
        batches.close()
    t0 = time.perf_counter()
    last = packer.flush(pad=config.pad_tail)
    timer.seconds["pack"] += time.perf_counter() - t0
    yield from (item if tagged else item[1] for item in last)


def _repeats(batch: list[Document], weighted: bool) -> list[int] | None:
    repeats = [1 if isinstance(d, str) or len(d) == 2 else int(d[2]) for d in batch]
    if not weighted and any(r != 1 for r in repeats):
        raise ValueError("a document carries a rehydration weight but ProducerConfig.rehydration is not set")
    return repeats if weighted else None


def packing_hash(config: ProducerConfig) -> str:
    """How documents became blocks beyond tokenizer and seq_len: FIM's and rehydration's fingerprints ("" when both
    are off, so a batch produced before either keeps its ledger fingerprint)."""
    return "+".join(h for h in (config.fim.fingerprint(), config.rehydration) if h)


def tokenize_and_produce(settings: KafkaSettings, request: ProduceRequest, texts: Iterable[Document]) -> ProduceReport:
    """texts -> DeepSeek tokenizer (batch API) -> BlockPacker per domain -> produce_blocks, with per-stage timings.

    A text may be a `(domain, text)` pair: documents are then packed per domain (a block never mixes domains),
    every message carries its `domain` header, and the report counts blocks, tokens and documents per domain.
    Bare texts are packed and produced exactly as before (no domain header).
    With `config.spans` (the default) every message carries a `spans` header naming the documents in it (`spans`).
    With `config.rehydration` set, a text may be `(domain, text, weight)`: tokenized once, packed `weight` times in a
    row (`cleaning.rehydration`), counted as one document plus `weight - 1` copies.

    `request.tokenizer` is a `TokenizerInfo`. Texts are read ahead in a background thread (`config.prefetch_batches`);
    while the producer connects and reads the ledger, up to one transaction's worth is tokenized ahead, and
    dropped when the ledger already holds this key.
    `stage_seconds` has setup / read / tokenize / pack / encode / produce / visible: setup is the wait for the
    Kafka setup that tokenizing ahead did not cover, read is time spent
    waiting on the reader, encode serialising and hashing the staged messages, produce the time inside
    transactions (producing, waiting on Kafka, committing), visible the wait for the commit markers.
    """
    config = request.config
    packer = DomainPackers(request.seq_len, request.tokenizer.eos_id)
    timer = StageTimer()
    spans = SpanRecorder(request.seq_len) if config.spans else None
    blocks = timed_blocks(texts, request.tokenizer, packer, config, timer, spans)
    request = replace(request, packing_hash=packing_hash(config))
    return produce_blocks(settings, request, blocks, Instruments(timer=timer, packer=packer, spans=spans))
