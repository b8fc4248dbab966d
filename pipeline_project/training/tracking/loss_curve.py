"""The loss curve of one invocation as a small PNG (matplotlib, headless Agg backend).

`render_loss_curve` answers None when matplotlib is not installed (it comes with mlflow's full install, not
with mlflow-skinny): the run then has no image, and nothing else changes.
"""

from __future__ import annotations

import importlib.util
import io
import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)

LOSS_CURVE_FILE = "loss_curve.png"


def render_loss_curve(steps: Sequence[int], losses: Sequence[float], title: str) -> bytes | None:
    """PNG bytes of loss against step (about 20-40 KB), or None without matplotlib or without steps."""
    if not steps:
        return None
    if importlib.util.find_spec("matplotlib") is None:
        log.info("matplotlib is not installed: no loss-curve image")
        return None
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=(6.4, 3.2), dpi=100)
    ax = fig.subplots()
    ax.plot(list(steps), list(losses), color="#1f77b4", linewidth=1.5, marker="o" if len(steps) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
