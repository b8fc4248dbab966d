"""Reading deploy/grafana/pipeline.json: its panels, their queries and the series those name."""

from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "pipeline.json"
SERIES = re.compile(r"\bpipeline_[a-zA-Z0-9_]+")


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


def series_named(expr: str) -> set[str]:
    return set(SERIES.findall(expr))


def all_series(dashboard: dict) -> set[str]:
    return {name for expr in queries(dashboard) for name in series_named(expr)}
