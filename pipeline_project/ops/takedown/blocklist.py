"""A takedown's blocklist entries: the fingerprints of the text itself and of every kept copy (from the index's
signatures), so a re-upload of any of them is dropped as `blocked:<request>` (`cleaning.dedup.blocklist`)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline_project.cleaning.config import MinHashConfig
from pipeline_project.cleaning.dedup.blocklist import BlockEntry
from pipeline_project.cleaning.steps.dedup import band_keys
from pipeline_project.ops.takedown.resolve import Copy, Fingerprint


def entries(
    request: str, prints: Sequence[Fingerprint], copies: Sequence[Copy], cfg: MinHashConfig
) -> list[BlockEntry]:
    out = [BlockEntry(request, f"{p.origin}#{i}", p.exact, p.signature, p.bands) for i, p in enumerate(prints)]
    for c in copies:
        if c.state == "kept" and c.signature is not None and c.signature.any():
            out.append(BlockEntry(request, c.ref, 0, c.signature, band_keys(c.signature, cfg)))
    return out
