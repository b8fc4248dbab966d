"""Which blocks every training step read, per rank: a compact record saved with each checkpoint.

The loader (with `trace` on) names the (partition, offset, block) of every block it delivers; `StepLog` wraps it,
cuts that list at each batch and keeps, per step not yet saved, runs of consecutive blocks of one message:
`[partition, offset, first block, count]`. A message holds `message_bytes / (4 * seq_len)` blocks (128 at the
defaults), so a rank's step is usually one or two runs, whatever its batch size.

The blocks a step passed over as retracted (`streaming/retractions`) are kept beside its runs, as
`[partition, offset, block, request id]`, in `retracted` (per rank, only the steps that passed any over).

Each checkpoint gets `provenance/steps.json`: the steps since the checkpoint before it in the lineage (the one
the invocation resumed from, or saved last), every rank's runs, and `previous`, that checkpoint's URI, so a
reader walks back from `latest.json` to any step (`streaming.provenance`). A fetched batch that was not trained
(another rank ran dry) is never written: `take(step)` hands out the first `step - last` entries only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

STEPS_FILE = "provenance/steps.json"
STEPS_VERSION = 1


def runs_of(trace: Sequence[tuple]) -> list[list[int]]:
    """(partition, offset, block[, domain]) per delivered block -> [partition, offset, first block, count] runs."""
    runs: list[list[int]] = []
    for entry in trace:
        p, offset, block = int(entry[0]), int(entry[1]), int(entry[2])
        last = runs[-1] if runs else None
        if last is not None and last[0] == p and last[1] == offset and last[2] + last[3] == block:
            last[3] += 1
        else:
            runs.append([p, offset, block, 1])
    return runs


class StepLog:
    """Iterates a tracing loader and keeps the runs of each batch until a checkpoint takes them."""

    def __init__(self, loader: Any, start_step: int):
        self.loader = loader
        self.saved_step = start_step  # the last step already written to a checkpoint
        self.pending: list[list[list[int]]] = []  # one entry per delivered batch after saved_step
        self.pending_retracted: list[list[list]] = []  # the same steps' retracted blocks passed over
        self.retracted_taken: dict[str, list[list]] = {}  # what the last `take` took of them

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            trace = self.loader.trace
            self.pending.append(runs_of(trace))
            trace.clear()
            retracted = getattr(self.loader, "retracted", [])
            self.pending_retracted.append([list(r) for r in retracted])
            retracted.clear()
            yield batch

    def take(self, step: int) -> dict[str, list[list[int]]]:
        """{step: runs} for the steps after the last taken up to `step`, which leave the log (their retracted blocks
        go to `retracted_taken`)."""
        n = step - self.saved_step
        taken = {str(self.saved_step + 1 + i): runs for i, runs in enumerate(self.pending[:n])}
        self.retracted_taken = {
            str(self.saved_step + 1 + i): passed for i, passed in enumerate(self.pending_retracted[:n]) if passed
        }
        del self.pending[:n]
        del self.pending_retracted[:n]
        self.saved_step = step
        return taken


def gather_steps(log: StepLog | None, step: int) -> list[dict[str, list[list[int]]]]:
    """Every rank's `log.take(step)`, in rank order (a collective: every rank calls; `{}` for a rank with no log)."""
    return gather_step_records(log, step)[0]


def gather_step_records(log: StepLog | None, step: int) -> tuple[list[dict], list[dict]]:
    """Every rank's runs and retracted blocks of the steps up to `step`, in rank order (one collective)."""
    from pipeline_project.training.distributed import all_gather_objects

    mine = (log.take(step), log.retracted_taken) if log is not None else ({}, {})
    gathered = all_gather_objects(mine)
    return [runs for runs, _ in gathered], [passed for _, passed in gathered]


def write_steps(
    checkpoint_dir: Path,
    ranks: list[dict[str, list[list[int]]]],
    *,
    step: int,
    previous: str | None,
    topic: str,
    seq_len: int,
    batch_size: int,
    retracted: list[dict[str, list[list]]] | None = None,
) -> Path:
    """`provenance/steps.json` in a local checkpoint directory (uploaded with it)."""
    steps = sorted({int(s) for r in ranks for s in r})
    body = {
        "version": STEPS_VERSION,
        "topic": topic,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "world_size": len(ranks),
        "previous": previous,
        "first_step": steps[0] if steps else step + 1,
        "last_step": step,
        "ranks": ranks,
        "retracted": retracted or [{} for _ in ranks],
    }
    path = checkpoint_dir / STEPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, separators=(",", ":")))
    return path
