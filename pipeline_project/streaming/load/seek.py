"""From saved loader positions to where this rank's shares start, checked against the log.

`checked_starts` cuts saved partition entries (this rank's own, or the union `state.merge_states` made) to the
rank's shares (`stripes.share_start`), checks the cursors against the log start and end offsets
(`preflight.check_cursors`: a cursor below the log start is a DataLossError unless `allow_data_loss`), and
starts every share the entries do not name (a partition added to the topic since) at its default, the log start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_project.streaming.load.preflight import SkippedRange, check_cursors
from pipeline_project.streaming.load.state import Cursor, start_positions
from pipeline_project.streaming.load.stripes import Share, Skips


def checked_starts(
    topic: str,
    entries: Mapping[str, Any],
    shares: Mapping[int, Share],
    *,
    own: bool,
    bounds: tuple[Mapping[int, int], Mapping[int, int]],
    defaults: Mapping[int, Cursor],
    allow_data_loss: bool,
) -> tuple[dict[int, Cursor], dict[int, Skips], list[SkippedRange]]:
    """(start cursor per share, skips ahead of them, deleted ranges skipped) from saved `entries`."""
    positions = start_positions(entries, shares, own=own)
    low, high = bounds
    mine = {p: c for p, (c, _) in positions.items()}
    checked, skipped = check_cursors(topic, mine, low=low, high=high, allow_data_loss=allow_data_loss)
    cursors = {p: checked.get(p, defaults[p]) for p in shares}
    return cursors, {p: sk for p, (_, sk) in positions.items() if sk}, skipped
