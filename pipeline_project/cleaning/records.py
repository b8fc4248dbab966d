"""The records that flow through the chain."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Document:
    id: str
    text: str
    source: str
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Quarantined:
    """Input that could not be read as a document. `reason` is a short machine reason."""

    id: str
    source: str
    reason: str
    detail: str = ""


@dataclass(frozen=True)
class Dropped:
    """A document a step removed, with its text so it can go to the exclusion sink."""

    id: str
    source: str
    step: str
    reason: str
    text: str
    meta: dict = field(default_factory=dict)

    @classmethod
    def of(cls, doc: Document, step: str, reason: str) -> Dropped:
        return cls(id=doc.id, source=doc.source, step=step, reason=reason, text=doc.text, meta=dict(doc.meta))
