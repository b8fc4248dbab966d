"""Varied Python modules for the demo's code domain: each is a few functions drawn from a pool, over identifiers
drawn per module, so two modules rarely share 70 % of their word 5-grams (the near-duplicate threshold) and the
code a demo uploads survives deduplication against the earlier demos' code on the same stack."""

from __future__ import annotations

import random

ENTITIES = [
    "order", "invoice", "sensor", "reading", "shipment", "account", "ticket", "batch", "parcel", "voyage",
    "patient", "booking", "meter", "sample", "station", "tariff", "vessel", "ledger", "payment", "survey",
    "harvest", "lesson", "recipe", "flight", "cargo", "claim", "lease", "signal", "vote", "permit",
]  # fmt: skip
FIELDS = [
    "amount", "weight", "price", "score", "count", "duration", "distance", "level", "rate", "volume",
    "depth", "margin", "balance", "quota", "latency", "pressure", "yield_", "height", "width", "capacity",
]  # fmt: skip
KEYS = ["key", "code", "name", "label", "ref", "slug", "tag", "region", "owner", "kind", "site", "route"]

FUNCTIONS = [
    '''def load_{e}s(path: Path) -> list[dict]:
    """Read {e} records from a JSON lines file, one object per line."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
''',
    """def total_{f}(rows: list[dict]) -> float:
    return sum(float(row.get("{f}", 0)) for row in rows)
""",
    """def by_{k}(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {{}}
    for row in rows:
        groups.setdefault(str(row.get("{k}")), []).append(row)
    return groups
""",
    '''def top_{e}s(rows: list[dict], n: int = {n}) -> list[dict]:
    """The {n} {e}s with the largest {f}."""
    return sorted(rows, key=lambda row: row.get("{f}", 0), reverse=True)[:n]
''',
    """def valid_{e}(row: dict) -> bool:
    return bool(row.get("{k}")) and {lo} <= float(row.get("{f}", -1)) <= {hi}
""",
    """def normalize_{f}(rows: list[dict]) -> list[dict]:
    peak = max((float(row.get("{f}", 0)) for row in rows), default=0.0) or 1.0
    return [{{**row, "{f}": float(row.get("{f}", 0)) / peak}} for row in rows]
""",
    """def write_{e}s(rows: list[dict], path: Path) -> int:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\\n")
    return len(rows)
""",
    """def moving_{f}(values: list[float], window: int = {w}) -> list[float]:
    out, acc = [], 0.0
    for i, value in enumerate(values):
        acc += value
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out
""",
    """def bucket_{f}(value: float, edges: tuple[float, ...] = ({lo}, {mid}, {hi})) -> int:
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)
""",
    """def dedupe_{e}s(rows: list[dict]) -> list[dict]:
    seen: set[str] = set()
    unique = []
    for row in rows:
        if row.get("{k}") not in seen:
            seen.add(row.get("{k}"))
            unique.append(row)
    return unique
""",
    """def summarize_{e}s(rows: list[dict]) -> str:
    values = [float(row.get("{f}", 0)) for row in rows]
    if not values:
        return "no {e}s"
    return f"{{len(values)}} {e}s, {f} from {{min(values):.2f}} to {{max(values):.2f}}"
""",
    """def merge_{e}s(left: list[dict], right: list[dict]) -> list[dict]:
    index = {{row["{k}"]: row for row in left}}
    for row in right:
        index[row["{k}"]] = {{**index.get(row["{k}"], {{}}), **row}}
    return list(index.values())
""",
    """def parse_{k}(text: str) -> tuple[str, int]:
    prefix, _, number = text.partition("-")
    return prefix.strip().lower(), int(number or {n})
""",
    """def retry_{e}(action, attempts: int = {w}) -> object:
    for attempt in range(attempts):
        try:
            return action()
        except OSError:
            if attempt == attempts - 1:
                raise
    return None
""",
]


def python_module(rng: random.Random, i: int) -> tuple[str, str]:
    """(path, source) of a Python module of 4 to 6 functions from the pool, over identifiers drawn for it."""
    e, f, k = rng.choice(ENTITIES), rng.choice(FIELDS), rng.choice(KEYS)
    lo, hi = rng.randint(0, 50), rng.randint(100, 5000)
    values = {"e": e, "f": f, "k": k, "n": rng.randint(3, 50), "w": rng.randint(2, 9), "lo": lo, "hi": hi}
    values["mid"] = (lo + hi) // 2
    body = "\n\n".join(t.format(**values) for t in rng.sample(FUNCTIONS, rng.randint(4, 6)))
    doc = f'"""{e.title()} records: {f} and {k} helpers (module {i})."""'
    source = f"{doc}\n\nfrom __future__ import annotations\n\nimport json\nfrom pathlib import Path\n\n\n{body}"
    return f"src/{e}s/{f.rstrip('_')}_{k}_{i}.py", source
