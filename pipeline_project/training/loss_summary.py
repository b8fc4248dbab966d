"""What a run says about its loss: the mean of its last steps and how far it moved, not one step's value.

One step's loss is noise on a short run (the demo once reported 11.997 after a curve that reached 6.47 two
steps earlier). `summarize_losses` takes the per-step losses of an invocation and answers the mean of the last
`window` steps (`smoothed`), the mean of the first `window` steps (`first`) and their difference (`change`,
negative when the loss fell), with `window = min(LOSS_WINDOW, steps)`: a plain mean, not an EMA, so the figure
names exactly the steps it covers. On runs shorter than two windows the two means share steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

LOSS_WINDOW = 20


class LossSummary(BaseModel):
    last_step: float  # the last step's loss alone
    smoothed: float  # mean of the last `window` steps
    first: float  # mean of the first `window` steps
    change: float  # smoothed - first
    window: int
    steps: int

    def as_metrics(self) -> dict[str, float]:
        """Flat names for MLflow's final metrics and Dagster's materialization metadata."""
        return {
            "loss_last_step": self.last_step,
            "loss_smoothed": self.smoothed,
            "loss_first": self.first,
            "loss_change": self.change,
            "loss_window": float(self.window),
        }


def summarize_losses(losses: Sequence[float], window: int = LOSS_WINDOW) -> LossSummary | None:
    """The summary of per-step `losses` in step order; None when there are none."""
    if not losses:
        return None
    k = max(1, min(window, len(losses)))
    first = sum(losses[:k]) / k
    smoothed = sum(losses[-k:]) / k
    return LossSummary(
        last_step=float(losses[-1]),
        smoothed=smoothed,
        first=first,
        change=smoothed - first,
        window=k,
        steps=len(losses),
    )


def from_metrics(metrics: dict) -> LossSummary | None:
    """The summary back from `as_metrics`' names (a materialization's metadata); None when they are missing."""
    try:
        return LossSummary(
            last_step=metrics["loss_last_step"],
            smoothed=metrics["loss_smoothed"],
            first=metrics["loss_first"],
            change=metrics["loss_change"],
            window=int(metrics["loss_window"]),
            steps=int(metrics.get("steps") or 0),
        )
    except (KeyError, TypeError, ValueError):
        return None


def describe_loss(summary: LossSummary) -> str:
    """`6.5200 (mean of the last 20 steps; last step 11.9970)`"""
    return f"{summary.smoothed:.4f} (mean of the last {summary.window} steps; last step {summary.last_step:.4f})"


def describe_change(summary: LossSummary) -> str:
    """`11.9900 -> 6.5200 (-5.4700): mean of the first 20 steps -> mean of the last 20`"""
    return (
        f"{summary.first:.4f} \u2192 {summary.smoothed:.4f} ({summary.change:+.4f}): mean of the first "
        f"{summary.window} steps \u2192 mean of the last {summary.window}"
    )
