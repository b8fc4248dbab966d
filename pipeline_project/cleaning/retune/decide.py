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
  (assumed still kept: a `retune --write` of that batch that dropped it took it out of the index, and a
  re-clean would then keep this copy); if its original in the batch is now dropped, which copy a re-clean keeps
  needs the text;
* `decontaminate` keeps no signal: when its benchmarks or settings changed, or it is newly on, the documents that
  reached it (kept, or dropped by it or after it) are re-checked from their cleaned text (`retune_decontam`; the
  text is post-masking, see there); one that matches is dropped there (`decontaminated:<benchmark>`), the others
  go on as above. A document the old step dropped that no longer matches, or one it dropped when it is now off,
  is undecidable (dedup after it needs the text and the index).

So a stricter threshold is answered exactly (kept documents have every signal), a looser one names the documents
that need a re-clean. Kept documents are decided assuming the undecidable ones stay dropped (they could otherwise
become originals that a kept document duplicates); the report says how many there are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from pipeline_project.cleaning.chain.profiles import build_chains
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.retune.decontam import DECONTAMINATE, Recheck, TextOf, decontam_change
from pipeline_project.cleaning.steps.signals import MissingSignal, Stored

DEDUP_STEPS = ("exact_dedup", "minhash_dedup")
BLOCKLIST = "takedown_blocklist"  # `steps.blocked.Blocked.name`: not in the chains, it runs only with a blocklist
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
        """The reason without its detail (a duplicate's original), but with the benchmark of a decontamination."""
        if self.decision != "dropped" or self.reason.startswith("decontaminated:"):
            return self.reason
        return self.reason.split(":", 1)[0]


@dataclass
class BatchRetune:
    batch_id: str
    rows: list[dict[str, Any]]
    outcomes: list[Outcome]
    notes: list[str] = field(default_factory=list)
    written: bool = False  # set by `retune --write` once the batch is published again
    refused: str = ""  # why `retune --write` did not write it
    # a produced batch written: its retraction (request, blocks) and exposure (the reads of those blocks)
    retracted: dict[str, Any] | None = None

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

    def affected(self) -> list[dict]:
        """The kept documents the new config drops: where they came from, and why they go."""
        out = []
        for row, o in zip(self.rows, self.outcomes):
            if row["decision"] == "kept" and o.decision == "dropped":
                kind, _, name = o.reason.partition(":")
                out.append(
                    {
                        "batch": self.batch_id,
                        "doc_id": row["doc_id"],
                        "source": row.get("source") or "",
                        "record": row.get("record") or "",
                        "domain": row.get("domain") or "",
                        "step": o.step,
                        "reason": o.reason,
                        "benchmark": name if kind == "decontaminated" else None,
                    }
                )
        return out

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


def _names(steps: list[Any]) -> list[str]:
    return [s.name for s in steps if s.name != DECONTAMINATE]


def _without_benchmarks(config: CleaningConfig) -> CleaningConfig:
    """`config` whose chains build without reading benchmark files (an old config's may be gone or changed)."""
    d = config.decontamination
    return config.model_copy(update={"decontamination": d.model_copy(update={"benchmarks": ()})})


class Retuner:
    """Re-decides rows of attribute files decided under `old` with the chains of `new`. `old_hash`: the config
    hash the batch was cleaned with (its manifest's), to tell a benchmark file changed in place since."""

    def __init__(self, old: CleaningConfig, new: CleaningConfig, old_hash: str = ""):
        self.old_chains, self.new_chains = build_chains(_without_benchmarks(old)), build_chains(new)
        self.everything = _selection_changed(old, new)
        why = decontam_change(old, new, old_hash)
        self.recheck = Recheck(new, why) if why else None
        self.plans: dict[str, tuple[list[Any], list[bool], str | None]] = {}
        for domain, steps in self.new_chains.items():
            before = self.old_chains.get(domain, [])
            if _names(before) != _names(steps):  # decontaminate may come or go: `_decide` handles it
                why = f"{domain} chain changed ({[s.name for s in before]} -> {[s.name for s in steps]})"
                self.plans[domain] = (steps, [], why)
                continue
            olds = {s.name: s for s in before}
            same = [s.name == DECONTAMINATE or _shape(olds[s.name]) == _shape(s) for s in steps]
            self.plans[domain] = (steps, same, None)

    def notes(self) -> list[str]:
        notes = [self.everything] if self.everything else []
        notes += [self.recheck.note()] if self.recheck else []
        for domain, (steps, same, why) in self.plans.items():
            if why:
                notes.append(why)
            notes += [f"{domain}/{s.name}: settings beyond thresholds changed" for s, ok in zip(steps, same) if not ok]
        return notes

    def run(self, batch_id: str, rows: list[dict], text_of: TextOf | None = None) -> BatchRetune:
        """`text_of(doc_ids)`: the cleaned texts of documents to re-check for decontamination (see the module)."""
        decided = [self._decide(row) for row in rows]
        outcomes = self._rechecked(rows, decided, text_of)
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

    def _rechecked(self, rows: list[dict], decided: list[tuple[Outcome, bool]], text_of) -> list[Outcome]:
        ids = [row["doc_id"] for row, (_, recheck) in zip(rows, decided) if recheck]
        reasons = self.recheck.reasons(ids, text_of) if self.recheck else {}
        outcomes = []
        for row, (outcome, recheck) in zip(rows, decided):
            reason = reasons.get(row["doc_id"]) if recheck else ""
            if reason is None:
                outcome = Outcome("undecidable", reason=f"{DECONTAMINATE}: changed, and the cleaned text is not found")
            elif reason:
                outcome = Outcome("dropped", DECONTAMINATE, reason)
            outcomes.append(outcome)
        return outcomes

    def _decide(self, row: dict) -> tuple[Outcome, bool]:
        """The row's outcome under the new chain if the decontaminate step passes it, and whether it must be
        re-checked there."""
        if row["decision"] == "quarantined":
            return original(row), False
        if self.everything:
            return Outcome("undecidable", reason=self.everything), False
        plan = self.plans.get(row.get("domain") or "")
        if plan is None:
            return Outcome("undecidable", reason=f"profile {row.get('domain')!r} is not in the new config"), False
        steps, same, why = plan
        if why:
            return Outcome("undecidable", reason=why), False
        names = [s.name for s in steps]
        was = original(row)
        if was.decision == "dropped" and was.step == BLOCKLIST:
            return was, False  # a takedown's drop (`steps.blocked`) holds under any config
        if was.decision == "dropped" and was.step == DECONTAMINATE and DECONTAMINATE not in names:
            return Outcome("undecidable", reason=f"{DECONTAMINATE} is off now: the steps after it need the text"), False
        at = names.index(was.step) if was.decision == "dropped" and was.step in names else len(names)
        recheck = False
        for i, (step, ok) in enumerate(zip(steps, same)):
            if not ok:
                return Outcome("undecidable", reason=f"{step.name}: settings beyond thresholds changed"), recheck
            if step.name == DECONTAMINATE and self.recheck:
                recheck = True  # passed it before (or dropped here: then the steps after were never reached)
            elif hasattr(step, "decide"):
                try:
                    reason = step.decide(row.get("lang") or "en", Stored(row, step.name))
                except MissingSignal as missing:
                    why = f"{step.name}: signal not computed when cleaned ({missing})"
                    return Outcome("undecidable", reason=why), recheck
                if reason is not None:
                    return Outcome("dropped", step.name, reason), recheck
            elif i == at:
                return (Outcome("dedup") if step.name in DEDUP_STEPS else was), recheck
            elif i > at:
                return Outcome("undecidable", reason=f"{step.name}: never reached (needs the text)"), recheck
        return (was if was.step == "index_commit" else Outcome("kept")), recheck
