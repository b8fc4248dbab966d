"""The records that flow through the chain."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# a quarantine reason is a short machine string: lower-case words joined by "_"
REASON_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_REASON_CHARS = 40
MAX_DETAIL_CHARS = 200


# the DocState.prepared entry holding the document's text masked for the exclusion sink
SINK_MASK = "exclusion_sink"


@dataclass
class DocState:
    """What steps compute about a document once and share with later steps; cleared when it leaves the chain.

    Each field names the step that writes it. Nothing here is written to the shards.
    """

    words: tuple[str, str, list[str]] | None = None  # base.doc_words: (text it was split from, language, words)
    exact_key: int | None = None  # ExactDedup: xxh3 of the normalized text, for the cross-batch index
    minhash: tuple[Any, Any] | None = None  # MinHashDedup: (signature uint32[num_perm], band keys uint64[bands])
    # a step's prepare, run ahead in a pool worker: step name -> (text it was computed from, value)
    prepared: dict[str, tuple[str, Any]] | None = None
    # quality signals the filters computed ("<step>.<name>" -> value), for the attribute file (steps/signals.py)
    signals: dict[str, Any] | None = None


@dataclass
class Document:
    id: str
    text: str
    source: str
    meta: dict = field(default_factory=dict)
    state: DocState = field(default_factory=DocState, repr=False, compare=False)


@dataclass(frozen=True)
class Quarantined:
    """Input that could not be read as a document.

    `reason` is a short machine reason (`readers.REASONS`, `ingest.INGEST_REASONS`); `detail` is for people,
    at most MAX_DETAIL_CHARS, and never holds document content beyond a short masked snippet.
    """

    id: str
    source: str
    reason: str
    detail: str = ""

    def __post_init__(self) -> None:
        if len(self.reason) > MAX_REASON_CHARS or not REASON_PATTERN.fullmatch(self.reason):
            raise ValueError(f"quarantine reason {self.reason!r} is not a short machine string")
        if len(self.detail) > MAX_DETAIL_CHARS:
            object.__setattr__(self, "detail", self.detail[: MAX_DETAIL_CHARS - 1] + "…")


@dataclass(frozen=True)
class Dropped:
    """A document a step removed, with its text so it can go to the exclusion sink.

    `masked_text`: the text with PII masked for the sink, when a pool worker already masked it.
    """

    id: str
    source: str
    step: str
    reason: str
    text: str
    meta: dict = field(default_factory=dict)
    masked_text: str | None = field(default=None, compare=False, repr=False)
    signals: dict | None = field(default=None, compare=False, repr=False)  # DocState.signals, for the attributes

    @classmethod
    def of(cls, doc: Document, step: str, reason: str) -> Dropped:
        ahead = doc.state.prepared.get(SINK_MASK) if doc.state.prepared else None
        masked = ahead[1] if ahead is not None and ahead[0] is doc.text else None
        return cls(
            id=doc.id,
            source=doc.source,
            step=step,
            reason=reason,
            text=doc.text,
            meta=dict(doc.meta),
            masked_text=masked,
            signals=doc.state.signals,
        )
