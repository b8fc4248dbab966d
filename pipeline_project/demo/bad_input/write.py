"""Malformed input at scale: files in many classes of bad input, and `expected.json` saying what becomes of each.

Each class maps to exactly one outcome at the readers: `kept` (valid but odd input that must be read, such as
UTF-16 with a BOM) or one quarantine reason of `cleaning.readers.REASONS`. A JSON Lines file of a bad class also
holds a few good lines, which are kept: they show that one bad record never costs its neighbours.

`write_bad_input(DIR, scale)` writes one folder per class plus `DIR/expected.json`:

    {"scale": ..., "reader": {ReaderConfig fields the scale is built against},
     "classes": {class: {"outcome": "kept" | reason, "description": ...}},
     "files": {relative path: {"class": ..., "kept": n, "quarantined": {reason: n}}},
     "totals": {"objects": ..., "records": ..., "kept": ..., "quarantined": {reason: n}}}

`expected.json` is written on one line without a "text" field, so when the whole DIR is uploaded
(`./scripts/demo.sh --source DIR`) it is read as a JSON Lines object too: it lists itself, as one
`missing_text_field` record, and the totals include it. The demo's "documents in" then equals totals.records.

Scales: `full` is what the issue asks for (a 200 MB line, a .txt over the 64 MiB document cap, a million tiny
documents, bombs that inflate to 8 GiB) and is read with the default ReaderConfig; `small` keeps every class with
caps scaled down (its `reader` overrides) so that a test reads all of it in seconds.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from pipeline_project.common.s3 import key_to_path
from pipeline_project.demo.bad_input.classes import CLASSES, EXPECTED_NAME, KEPT, SCALES, BadClass, BadFile, Scale

__all__ = ["CLASSES", "EXPECTED_NAME", "KEPT", "SCALES", "BadClass", "BadFile", "Scale", "generate", "write_bad_input"]


def generate(scale: str = "small", seed: int = 0) -> Iterator[tuple[BadClass, BadFile]]:
    """Every file of every class, lazily (a full-scale file is built only when it is written)."""
    sc = SCALES[scale]
    for i, cls in enumerate(CLASSES):
        for f in cls.make(random.Random(seed * 1000 + i), sc):
            yield cls, f


def write_bad_input(directory: str | Path, scale: str = "small", seed: int = 0, progress=None) -> dict:
    """Write every class under `directory` and `directory/expected.json`; return what expected.json holds."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict] = {}
    for cls, f in generate(scale, seed):
        target = key_to_path(root, f.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            for chunk in f.chunks:
                out.write(chunk)
        files[f.path] = {"class": cls.name, "kept": f.kept, "quarantined": dict(f.quarantined)}
        if progress is not None:
            progress(cls, f, target.stat().st_size)
    # expected.json is read as one JSON line without a text field; it accounts for itself
    files[EXPECTED_NAME] = {"class": "expected_manifest", "kept": 0, "quarantined": {"missing_text_field": 1}}
    quarantined: Counter = Counter()
    for entry in files.values():
        quarantined.update(entry["quarantined"])
    kept = sum(e["kept"] for e in files.values())
    expected = {
        "scale": scale,
        "seed": seed,
        "reader": SCALES[scale].reader,
        "classes": {c.name: {"outcome": c.outcome, "description": c.description} for c in CLASSES},
        "files": files,
        "totals": {
            "objects": len(files),
            "records": kept + sum(quarantined.values()),
            "kept": kept,
            "quarantined": dict(sorted(quarantined.items())),
        },
    }
    expected["classes"]["expected_manifest"] = {
        "outcome": "missing_text_field",
        "description": "this file: one JSON line without a text field",
    }
    (root / EXPECTED_NAME).write_text(json.dumps(expected, ensure_ascii=True, separators=(",", ":")) + "\n")
    return expected
