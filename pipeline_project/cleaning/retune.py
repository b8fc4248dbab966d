"""Re-decide a cleaned batch under a new config from its attribute file, without reading raw text (issue 31 item 3).

Each document walks its profile's chain of the new config again:

* a retunable filter (one with `decide`, `steps/signals.py`) re-applies its rules to the stored signals. Its
  settings other than thresholds (`SHAPE_FIELDS`: stop-word lists, short-line lengths, the language model's input)
  must be unchanged, since they change the signal itself; a signal the filter never computed (it stopped at an
  earlier rule, or the document was dropped before the step) makes the document *undecidable*;
* any other step (repair, C4's line removal, code filters, dedup, masking) must have exactly its old settings;
  a document it passed before it passes again (the text it sees is the same), one it dropped it drops again, and
  one that never reached it is undecidable: the step needs the text;
* a duplicate stays a duplicate while what it duplicates stays kept (in the batch), or lives in another batch
  (the index still holds it); if its original is now dropped, which copy a re-clean keeps needs the text.

So a stricter threshold is answered exactly (kept documents have every signal), a looser one names the documents
that need a re-clean. Kept documents are decided assuming the undecidable ones stay dropped (they could otherwise
become originals that a kept document duplicates); the report says how many there are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.profiles import build_chains
from pipeline_project.cleaning.steps.signals import MissingSignal, Stored

DEDUP_STEPS = ("exact_dedup", "minhash_dedup")
# settings of a retunable step that shape its signals rather than compare them with a threshold
SHAPE_FIELDS = {
    "language_id": {"max_chars", "aliases", "enabled"},
    "gopher_quality": {"stop_words", "enabled"},
    "gopher_repetition": {"enabled"},
    "fineweb": {"short_line_length", "short_line_length_by_lang", "enabled"},
}


@dataclass(frozen=True)
class Outcome:
    decision: str  # kept | dropped | quarantined | undecidable
    step: str = ""
    reason: str = ""

    @property
    def reason_class(self) -> str:
        return self.reason.split(":", 1)[0] if self.decision == "dropped" else self.reason


@dataclass
class BatchRetune:
    batch_id: str
    rows: list[dict[str, Any]]
    outcomes: list[Outcome]
    notes: list[str] = field(default_factory=list)

    def changes(self) -> Counter:
        """(domain, "kept -> dropped" | "dropped -> kept" | "reason" | "undecidable", detail) -> documents."""
        out: Counter = Counter()
        for row, new in zip(self.rows, self.outcomes):
            old = original(row)
            if new.decision == "undecidable":
                out[(row["domain"] or "", "undecidable", new.reason)] += 1
            elif old.decision != new.decision:
                out[(row["domain"] or "", f"{old.decision} -> {new.decision}", f"{new.step}:{new.reason_class}")] += 1
            elif old.decision == "dropped" and (old.step, old.reason_class) != (new.step, new.reason_class):
                detail = f"{old.step}:{old.reason_class} -> {new.step}:{new.reason_class}"
                out[(row["domain"] or "", "other reason", detail)] += 1
        return out

    def undecidable(self) -> int:
        return sum(1 for o in self.outcomes if o.decision == "undecidable")

    def newly_dropped(self) -> dict[str, Outcome]:
        return {
            r["doc_id"]: o
            for r, o in zip(self.rows, self.outcomes)
            if r["decision"] == "kept" and o.decision == "dropped"
        }

    def newly_kept(self) -> list[str]:
        return [
            r["doc_id"] for r, o in zip(self.rows, self.outcomes) if r["decision"] != "kept" and o.decision == "kept"
        ]


def original(row: dict) -> Outcome:
    return Outcome(row["decision"], row.get("step") or "", row.get("reason") or "")


def step_settings(step: Any, drop: set[str] = frozenset()) -> dict:
    """A step's settings (its config models and plain attributes), without the fields in `drop`."""
    out: dict[str, Any] = {}
    for name, value in vars(step).items():
        if isinstance(value, BaseModel):
            out[name] = {k: v for k, v in value.model_dump(mode="json").items() if k not in drop}
        elif isinstance(value, int | float | str | bool | tuple | type(None)):
            out[name] = value
    return out


def _shape(step: Any) -> dict:
    if hasattr(step, "decide"):
        fields = set(type(step.cfg).model_fields) - SHAPE_FIELDS.get(step.name, set())
        return step_settings(step, drop=fields)
    return step_settings(step)


def _selection_changed(old: CleaningConfig, new: CleaningConfig) -> str | None:
    for name, a, b in (
        ("reader", old.reader, new.reader),
        ("profile selection", old.profiles.select, new.profiles.select),
        ("profiles.enabled", old.profiles.enabled, new.profiles.enabled),
        ("encoding", old.encoding, new.encoding),
    ):
        if a != b:
            return f"{name} changed: reading or routing needs the raw text"
    return None


class Retuner:
    """Re-decides rows of attribute files decided under `old` with the chains of `new`."""

    def __init__(self, old: CleaningConfig, new: CleaningConfig):
        self.old_chains, self.new_chains = build_chains(old), build_chains(new)
        self.everything = _selection_changed(old, new)
        self.plans: dict[str, tuple[list[Any], list[bool], str | None]] = {}
        for domain, steps in self.new_chains.items():
            before = self.old_chains.get(domain, [])
            if [s.name for s in before] != [s.name for s in steps]:
                why = f"{domain} chain changed ({[s.name for s in before]} -> {[s.name for s in steps]})"
                self.plans[domain] = (steps, [], why)
                continue
            same = [_shape(a) == _shape(b) for a, b in zip(before, steps)]
            self.plans[domain] = (steps, same, None)

    def notes(self) -> list[str]:
        notes = [self.everything] if self.everything else []
        for domain, (steps, same, why) in self.plans.items():
            if why:
                notes.append(why)
            notes += [f"{domain}/{s.name}: settings beyond thresholds changed" for s, ok in zip(steps, same) if not ok]
        return notes

    def run(self, batch_id: str, rows: list[dict]) -> BatchRetune:
        outcomes = [self._decide(row) for row in rows]
        index = {row["doc_id"]: i for i, row in enumerate(rows)}
        prefix = batch_id + "/"
        for i, (row, out) in enumerate(zip(rows, outcomes)):
            if out.decision != "dedup":
                continue
            target = row.get("dup_of") or ""
            j = index.get(target[len(prefix) :]) if target.startswith(prefix) else None
            if j is None or outcomes[j].decision == "kept":
                outcomes[i] = Outcome("dropped", row["step"], row["reason"])
            else:
                outcomes[i] = Outcome("undecidable", reason=f"its original {target} is no longer kept")
        return BatchRetune(batch_id, rows, outcomes, self.notes())

    def _decide(self, row: dict) -> Outcome:
        if row["decision"] == "quarantined":
            return original(row)
        if self.everything:
            return Outcome("undecidable", reason=self.everything)
        plan = self.plans.get(row.get("domain") or "")
        if plan is None:
            return Outcome("undecidable", reason=f"profile {row.get('domain')!r} is not in the new config")
        steps, same, why = plan
        if why:
            return Outcome("undecidable", reason=why)
        names = [s.name for s in steps]
        was = original(row)
        at = names.index(was.step) if was.decision == "dropped" and was.step in names else len(names)
        for i, (step, ok) in enumerate(zip(steps, same)):
            if not ok:
                return Outcome("undecidable", reason=f"{step.name}: settings beyond thresholds changed")
            if hasattr(step, "decide"):
                try:
                    reason = step.decide(row.get("lang") or "en", Stored(row, step.name))
                except MissingSignal as missing:
                    return Outcome("undecidable", reason=f"{step.name}: signal not computed when cleaned ({missing})")
                if reason is not None:
                    return Outcome("dropped", step.name, reason)
            elif i == at:
                return Outcome("dedup") if step.name in DEDUP_STEPS else was
            elif i > at:
                return Outcome("undecidable", reason=f"{step.name}: never reached (needs the text)")
        return was if was.step == "index_commit" else Outcome("kept")
