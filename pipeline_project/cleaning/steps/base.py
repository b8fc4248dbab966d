"""A step has one job and a `name`; it returns the documents it keeps and the ones it drops, with a reason."""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pipeline_project.cleaning.records import Document, Dropped
from pipeline_project.cleaning.steps.text import split_words


@dataclass
class RunContext:
    batch_id: str
    index: object | None = None  # dedup_index.ChainedIndex or LocalIndex, typed loosely to keep steps import-light
    scope: str = "global"
    blocklist: object | None = None  # dedup.blocklist.Blocklist: the takedown blocklist (`steps.blocked`); None: off
    # per step name, what the step has kept so far in this chunk, shared by every profile's chain: the same text
    # routed to two profiles (a web folder and a books folder) is kept once
    chunk_state: dict[str, Any] = field(default_factory=dict)

    @property
    def use_index(self) -> bool:
        return self.index is not None and self.scope == "global"


@dataclass
class StepStats:
    name: str
    docs_in: int = 0
    dropped: int = 0
    modified: int = 0
    seconds: float = 0.0
    reasons: Counter = field(default_factory=Counter)
    notes: dict = field(default_factory=dict)
    profile: str = ""  # the cleaning profile whose chain the step belongs to ("" for read and routing)

    def absorb(self, other: StepStats) -> None:
        """Add another run of the same step (another worker's slice, another chunk) to these counts."""
        self.docs_in += other.docs_in
        self.dropped += other.dropped
        self.modified += other.modified
        self.seconds += other.seconds
        self.reasons.update(other.reasons)
        for k, v in other.notes.items():
            if isinstance(v, int | float):
                self.notes[k] = self.notes.get(k, 0) + v


class Step(abc.ABC):
    """A step of the chain. A step whose per-document work depends on the text alone also defines
    `prepare(doc) -> Any`, so a pool worker can do that work ahead (`prepare_ahead`, `prepared`)."""

    name = "step"

    @abc.abstractmethod
    def run(self, docs: list[Document], ctx: RunContext, stats: StepStats) -> tuple[list[Document], list[Dropped]]:
        """Return the documents kept and those dropped (with their reasons)."""


T = TypeVar("T")


def prepare_ahead(steps: list[Step], doc: Document) -> None:
    """Run the `prepare` of each step that has one on `doc` now, for `prepared` to find later."""
    doc.state.prepared = {s.name: (doc.text, s.prepare(doc)) for s in steps if hasattr(s, "prepare")}


def prepared(step: Step, doc: Document, compute: Callable[[], T]) -> T:
    """What `step.prepare` computed ahead for the document's current text, else `compute()` now.

    Only steps that do not change the text run between the two, or the text no longer matches and the value
    is computed again; the identity check holds across the pool because one result is pickled at once.
    """
    ahead = doc.state.prepared
    got = ahead.get(step.name) if ahead else None
    if got is not None and got[0] is doc.text:
        return got[1]
    return compute()


class DocFilter(Step):
    """Per-document step. `check` returns a drop reason, or None to keep (it may rewrite doc.text)."""

    @abc.abstractmethod
    def check(self, doc: Document) -> str | None:
        """A drop reason, or None to keep."""

    def run(self, docs, ctx, stats):
        kept, dropped = [], []
        for doc in docs:
            before = doc.text
            reason = self.check(doc)
            if reason is None:
                kept.append(doc)
                if doc.text is not before and doc.text != before:
                    stats.modified += 1
            else:
                stats.reasons[reason] += 1
                dropped.append(Dropped.of(doc, self.name, reason))
        stats.dropped += len(dropped)
        return kept, dropped


def doc_lang(doc: Document) -> str:
    return doc.meta.get("lang") or "en"


def doc_words(doc: Document) -> list[str]:
    """Words of the current text, computed once per text and language and shared by the filters."""
    lang = doc_lang(doc)
    cached = doc.state.words
    if cached is not None and cached[0] is doc.text and cached[1] == lang:
        return cached[2]
    words = split_words(doc.text, lang)
    doc.state.words = (doc.text, lang, words)
    return words
