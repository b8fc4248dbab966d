"""The cleaning chain: read records in, kept / dropped / quarantined out, with per-step counts."""

from __future__ import annotations

import functools
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeline_project.cleaning.chain.budget import can_interrupt
from pipeline_project.cleaning.chain.document import DocumentFilters, FilterOutput, take_ahead
from pipeline_project.cleaning.chain.profiles import (
    Positioned,
    ProfileRouter,
    build_chains,
    run_chain,
    split_at_dedup,
)
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.config.profiles import PROFILE_NAMES
from pipeline_project.cleaning.errors import CountsMismatchError
from pipeline_project.cleaning.records import Document, Dropped, Quarantined
from pipeline_project.cleaning.steps import ExactDedup, MinHashDedup, RunContext, Step, StepStats
from pipeline_project.cleaning.steps.blocked import Blocked

log = logging.getLogger(__name__)


def reason_key(reason: str) -> str:
    """A drop reason without its detail; the benchmark of `decontaminated:<benchmark>` is the reason, kept."""
    return reason if reason.startswith("decontaminated:") else reason.split(":", 1)[0]


def blocked_step(config: CleaningConfig, post_chain: list[Step]) -> Blocked:
    """The blocklist step of one profile, sharing the keys its dedup steps compute."""
    exact = next((s for s in post_chain if isinstance(s, ExactDedup)), None)
    minhash = next((s for s in post_chain if isinstance(s, MinHashDedup)), None)
    return Blocked(config.dedup.minhash, exact, minhash)


def profile_counts(step_stats: list[StepStats]) -> dict[str, dict[str, int]]:
    """Per profile: documents routed to it (its first step's input), dropped by its steps, kept."""
    out: dict[str, dict[str, int]] = {}
    for s in step_stats:
        if s.profile:
            c = out.setdefault(s.profile, {"in": s.docs_in, "kept": 0, "dropped": 0})
            c["dropped"] += s.dropped
    for c in out.values():
        c["kept"] = c["in"] - c["dropped"]
    order = {name: i for i, name in enumerate(PROFILE_NAMES)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def _row(name: str, docs_in: int, dropped: int, modified: int | str, seconds: float, reasons: str) -> str:
    pct = f"{100.0 * dropped / docs_in:.1f}" if docs_in else "0.0"
    return f"| {name} | {docs_in} | {dropped} | {pct} | {modified} | {seconds:.2f} | {reasons or '-'} |"


_HEAD = ["| step | in | dropped | dropped % | modified | seconds | reasons |", "|---|---:|---:|---:|---:|---:|---|"]


def removal_tables(step_stats: list[StepStats], counts: dict) -> str:
    """One markdown table per profile (its steps), then the batch table: reading, routing, one line per
    profile, and the total. Every table's counts add up: in = kept + dropped."""
    parts = []
    per_profile = profile_counts(step_stats)
    for profile, c in per_profile.items():
        rows = [f"**{profile}**: {c['in']} in, {c['kept']} kept, {c['dropped']} dropped", "", *_HEAD]
        for s in step_stats:
            if s.profile == profile:
                reasons = ", ".join(f"{r}: {n}" for r, n in s.reasons.most_common(6))
                rows.append(_row(s.name, s.docs_in, s.dropped, s.modified, s.seconds, reasons))
        rows.append(f"| **{profile} total** | {c['in']} | {c['dropped']} | | | | kept {c['kept']} |")
        parts.append("\n".join(rows))
    rows = ["**batch**", "", *_HEAD]
    for s in step_stats:
        if s.profile:
            continue
        if s.name == "profile_select":
            routed = ", ".join(f"{k}: {v}" for k, v in s.notes.items() if isinstance(v, int))
            rows.append(_row(s.name, s.docs_in, s.dropped, "", s.seconds, f"routed {routed}" if routed else ""))
        else:
            reasons = ", ".join(f"{r}: {n}" for r, n in s.reasons.most_common(6))
            rows.append(_row(s.name, s.docs_in, s.dropped, s.modified, s.seconds, reasons))
    for profile, c in per_profile.items():
        seconds = sum(s.seconds for s in step_stats if s.profile == profile)
        rows.append(_row(f"profile {profile}", c["in"], c["dropped"], "", seconds, f"kept {c['kept']}"))
    rows.append(
        f"| **total** | {counts.get('in', 0)} | {counts.get('dropped', 0) + counts.get('quarantined', 0)} | | | | "
        f"kept {counts.get('kept', 0)} |"
    )
    parts.append("\n".join(rows))
    return "\n\n".join(parts)


@dataclass
class CleaningResult:
    kept: list[Document] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    # read and profile_select (profile ""), then each profile's steps (StepStats.profile); index_commit last
    step_stats: list[StepStats] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    batch_id: str = ""

    def update_counts(self, n_in: int) -> None:
        self.counts = {
            "in": n_in,
            "kept": len(self.kept),
            "dropped": len(self.dropped),
            "quarantined": len(self.quarantined),
        }
        self.check_counts()

    def dropped_by_reason(self) -> dict[str, int]:
        """Counts keyed `step:reason` (the reason without its detail; `decontaminated:<benchmark>` whole) and
        `quarantine:reason`."""
        counts: Counter = Counter(f"{d.step}:{reason_key(d.reason)}" for d in self.dropped)
        counts.update(f"quarantine:{q.reason}" for q in self.quarantined)
        return dict(counts)

    def profile_counts(self) -> dict[str, dict[str, int]]:
        """{profile: {"in", "kept", "dropped"}} from the documents themselves (their `meta["domain"]`)."""
        out = {name: {"in": 0, "kept": 0, "dropped": 0} for name in profile_counts(self.step_stats)}
        for key, items in (("kept", self.kept), ("dropped", self.dropped)):
            for item in items:
                c = out.setdefault(item.meta.get("domain", ""), {"in": 0, "kept": 0, "dropped": 0})
                c[key] += 1
                c["in"] += 1
        return out

    def check_counts(self) -> None:
        c = self.counts
        if c["in"] != c["kept"] + c["dropped"] + c["quarantined"]:
            raise CountsMismatchError(f"cleaning lost documents: {c}")
        by_docs, by_stats = self.profile_counts(), profile_counts(self.step_stats)
        if any(by_docs.get(name) != counts for name, counts in by_stats.items()):
            raise CountsMismatchError(f"per-profile counts disagree: documents {by_docs}, steps {by_stats}")

    def removal_table_markdown(self) -> str:
        return removal_tables(self.step_stats, self.counts)


@dataclass
class Started:
    """A chunk whose filters are running (or will run in process); `filtered()` returns their output."""

    batch_id: str
    docs: list[Document]
    quarantined: list[Quarantined]
    filtered: Callable[[], FilterOutput]


class CleaningPipeline:
    """Cleans one chunk: `start` routes each document to its profile's chain (`profiles.py`); with a `pool`
    (`workers.FilterPool`) the routing and the per-document filters run in its workers while the caller goes on;
    `finish` then deduplicates and masks here, in order. `stream.StreamingCleaner` drives it chunk by chunk.

    Every document's per-document work runs under its CPU budget (`budget.py`): without a pool, in this process
    when it runs on the main thread, else in a pool of one worker that the pipeline starts when first needed.
    `chains_factory` builds the chains from the config (a test passes a variant)."""

    def __init__(self, config: CleaningConfig | None = None, pool: Any = None, chains_factory=build_chains):
        self.config = config or CleaningConfig()
        self.chains = chains_factory(self.config)
        self.chains_factory = chains_factory
        self.filters = DocumentFilters(self.config, lambda _: self.chains)
        self.steps = self.chains["en_web"]
        split = {name: split_at_dedup(steps) for name, steps in self.chains.items()}
        self.filter_chains = {name: parts[0] for name, parts in split.items()}
        self.router = ProfileRouter(self.config, self.filter_chains)
        self.post_chains = {name: parts[1] for name, parts in split.items()}
        # each profile's takedown blocklist step, run before its post chain when `finish` is given a blocklist
        self.blocked = {name: blocked_step(self.config, steps) for name, steps in self.post_chains.items()}
        self.pool = pool

    def start(self, items: Iterable[Document | Quarantined], batch_id: str) -> Started:
        """Sort `items` into documents and quarantine records and hand the documents to the filters: to the
        pool's workers at once (they run while the caller goes on), or in process when `finish` asks."""
        docs: list[Document] = []
        quarantined: list[Quarantined] = []
        for item in items:
            (quarantined if isinstance(item, Quarantined) else docs).append(item)
        if self.pool is not None and docs:
            filtered = self.pool.submit(docs, batch_id)
        elif can_interrupt() or not docs:
            filtered = functools.partial(self.filters.run, docs, batch_id)
        else:
            filtered = self._own_pool().submit(docs, batch_id)
        return Started(batch_id, docs, quarantined, filtered)

    def _own_pool(self) -> Any:
        """A pool of one worker, for a pipeline called off the main thread (where no budget timer can be set)."""
        if self.pool is None:
            from pipeline_project.cleaning.chain.pool import FilterPool

            self.pool = FilterPool(self.config, 1, self.chains_factory)
            weakref.finalize(self, self.pool.close)
        return self.pool

    def finish(self, started: Started, index: Any = None, blocklist: Any = None) -> CleaningResult:
        """Wait for the filters of `started`, then deduplicate and mask here, in order, looking duplicates up in
        `index` (read only; `dedup_index.ChainedIndex` in the streaming cleaner). Nothing is written to it: the
        kept documents carry their dedup keys in `doc.state` for the caller to commit. With `blocklist`
        (`dedup.blocklist.Blocklist`), each profile first drops what takedowns blocked (`steps.blocked`)."""
        batch_id, docs, quarantined = started.batch_id, started.docs, started.quarantined
        n_in = len(docs) + len(quarantined)
        read = StepStats("read", docs_in=n_in, dropped=len(quarantined), reasons=Counter(q.reason for q in quarantined))
        read.notes["encoding_converted"] = sum(
            1 for d in docs if d.meta.get("encoding", "utf-8") not in ("utf-8", "utf-8-sig")
        )
        result = CleaningResult(quarantined=quarantined, step_stats=[read], batch_id=batch_id)

        ctx = RunContext(batch_id=batch_id, index=index, blocklist=blocklist)
        if index is not None:
            index.begin_batch(batch_id)  # a re-run of this batch replaces its own entries
        kept, dropped, stats, late = started.filtered()
        if late:  # over their CPU budget
            result.quarantined.extend(late)
            reasons = Counter(q.reason for q in late)
            result.step_stats.append(StepStats("cpu_budget", docs_in=len(docs), dropped=len(late), reasons=reasons))
        stats, ahead = take_ahead(stats)
        result.dropped.extend(dropped)
        result.step_stats.extend(stats)
        final: Positioned = []
        for name, steps in self.post_chains.items():
            if kept.get(name):
                steps = [self.blocked[name], *steps] if blocklist is not None else steps
                done = len(result.step_stats)
                final.extend(run_chain(steps, kept[name], ctx, name, result.dropped, result.step_stats))
                for s in result.step_stats[done:]:  # the workers' seconds on this step's per-document work
                    s.seconds += ahead.get((name, s.name), 0.0)
        final.sort(key=lambda item: item[0])
        result.kept = [doc for _, doc in final]
        for s in result.step_stats[1:]:
            log.info("%s/%s: %d in, %d dropped in %.2fs", s.profile, s.name, s.docs_in, s.dropped, s.seconds)
        result.update_counts(n_in)
        return result
