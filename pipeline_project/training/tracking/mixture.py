"""The training mixture in MLflow: realized vs target proportions per step, dry domains as events, final shares.

Rank 0 logs, at every logged step, `mixture/realized/<domain>` (the global sequence's share of each domain
since the proportions were set: the union of all ranks' blocks, as `RankMixture` deals them) and
`mixture/target/<domain>`. A domain that runs dry on rank 0 is logged once as the metric
`mixture/exhausted/<domain>` (value: global draws so far) and the tag `mixture.exhausted.<domain>` (the
policy). At the end, `mixture/share/<domain>` is each domain's share of the blocks every rank delivered in
this invocation, from the ranks' end states (`final_mixture_metrics`), and the dry events that came with
the end of the data (`final_report`). Without a mixture all of this is
empty. Pure functions and a small stateful helper; the MLflow calls go through `MlflowRun`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MixtureReport:
    """Per-step mixture metrics of one loader; `events_logged` remembers which dry events MLflow already has."""

    loader: Any
    events_logged: int = 0
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, loader: Any) -> MixtureReport | None:
        return cls(loader) if hasattr(loader, "mixture_figures") else None

    def step_metrics(self) -> dict[str, float]:
        """Realized and target shares, plus one `mixture/exhausted/<d>` per dry event not logged yet."""
        figures = self.loader.mixture_figures()
        out = {f"mixture/realized/{d}": float(v) for d, v in figures["realized"].items()}
        out.update({f"mixture/target/{d}": float(v) for d, v in figures["target"].items()})
        new = figures["events"][self.events_logged :]
        for event in new:
            out[f"mixture/exhausted/{event['domain']}"] = float(event["draws"])
            self.tags[f"mixture.exhausted.{event['domain']}"] = event["policy"]
        self.events_logged += len(new)
        return out

    def take_tags(self) -> dict[str, str]:
        tags, self.tags = self.tags, {}
        return tags


def final_report(progress: Any, start_states: Sequence[Any], end_states: Sequence[Any]) -> dict[str, float]:
    """The final metrics of the mixture: shares over all ranks, and the dry events met after the last logged step
    (a bounded loader usually meets its dry domain at the end); their tags go to the run here (rank 0)."""
    out = final_mixture_metrics(start_states, end_states)
    report = getattr(progress, "mixture", None)
    if report is None or getattr(progress, "mlflow_run", None) is None:
        return out
    out.update({k: v for k, v in report.step_metrics().items() if k.startswith("mixture/exhausted/")})
    if tags := report.take_tags():
        progress.mlflow("tag dry domains", progress.mlflow_run.set_tags, tags)
    return out


def final_mixture_metrics(start_states: Sequence[Any], end_states: Sequence[Any]) -> dict[str, float]:
    """Each domain's share of the blocks all ranks delivered in this invocation (empty without a mixture)."""
    totals: dict[str, int] = {}
    for start, end in zip(start_states, end_states, strict=True):
        before = _delivered(start)
        for d, n in _delivered(end).items():
            totals[d] = totals.get(d, 0) + n - before.get(d, 0)
    n = sum(totals.values())
    if not n:
        return {}
    return {**{f"mixture/share/{d}": c / n for d, c in sorted(totals.items())}, "mixture/blocks": float(n)}


def _delivered(state: Any) -> dict[str, int]:
    if not isinstance(state, dict) or not state.get("mixture"):
        return {}
    return {d: int(c) for d, c in state["mixture"]["rank"].get("delivered", {}).items()}
