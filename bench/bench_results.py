"""What every benchmark writes beside its figures: the machine and its load average, the JSON file, the table."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def host(load_start: float) -> dict:
    """CPUs and the 1-minute load average at the start (given) and now."""
    return {"cpus": os.cpu_count(), "loadavg_1m_at_start": load_start, "loadavg_1m_at_end": os.getloadavg()[0]}


def load_line(result: dict) -> str:
    h = result["host"]
    return f"load average {h['loadavg_1m_at_start']:.2f} -> {h['loadavg_1m_at_end']:.2f} (1 min), {h['cpus']} CPUs"


def write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"), **result}, indent=2))


def print_table(header: list[str], align: list[str], rows: list[list[str]]) -> None:
    """A markdown table; `align` per column: "l" or "r"."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
