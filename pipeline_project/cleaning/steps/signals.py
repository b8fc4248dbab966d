"""Quality signals: the values a filter compares with its thresholds, kept per document (issue 31 item 3).

A retunable filter writes its rules once, as `decide(lang, get, doc)`: `get(name, compute)` gives a signal's
value. While cleaning (`Live`) it computes the value and records it in `doc.state.signals` under
"<step>.<name>"; when retuning (`Stored`) it reads the value recorded then, and raises `MissingSignal` where the
filter never computed it (it stopped at an earlier rule). So the same code decides both times, and a threshold
change is answered from the stored values or said to need the text again, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline_project.cleaning.records import Document


class MissingSignal(Exception):
    """A rule needs a signal that was not computed when the document was cleaned."""


class Live:
    __slots__ = ("prefix", "store")

    def __init__(self, doc: Document, step: str):
        if doc.state.signals is None:
            doc.state.signals = {}
        self.store = doc.state.signals
        self.prefix = step + "."

    def __call__(self, name: str, compute: Callable[[], Any]) -> Any:
        value = compute()
        self.store[self.prefix + name] = value
        return value


class Stored:
    __slots__ = ("prefix", "row")

    def __init__(self, row: dict[str, Any], step: str):
        self.row = row
        self.prefix = step + "."

    def __call__(self, name: str, compute: Callable[[], Any] | None = None) -> Any:
        value = self.row.get(self.prefix + name)
        if value is None:  # null in the attribute file: never computed
            raise MissingSignal(self.prefix + name)
        return value


class Lazy:
    """A value computed on first use (live cleaning only: a retune never calls it)."""

    __slots__ = ("compute", "value")

    def __init__(self, compute: Callable[[], Any]):
        self.compute = compute
        self.value: Any = self

    def __call__(self) -> Any:
        if self.value is self:
            self.value = self.compute()
        return self.value
