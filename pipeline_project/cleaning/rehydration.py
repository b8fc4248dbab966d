"""Rehydration weights from duplicate-cluster counts (issue 31 item 4), FineWeb-2's rule.

FineWeb-2 removes all but one document of each duplicate cluster, keeps the cluster size, and "re-hydrates":
a kept document is repeated according to its cluster size N (huggingface/fineweb-2 README): N=1 once, N=2 or 3
N times, N=4 three times, 5 <= N < 100 five times, 100 <= N < 1000 eight times, N >= 1000 once (very large
clusters are assumed to be boilerplate or spam). Moderately duplicated text is upsampled, heavily duplicated
text is not.

Here N = 1 + exact copies + near copies (`dedup_copies`, the attribute file's `copies_exact`/`copies_near`).
`rehydrate` is the hook: it repeats shard records by their weight, deterministically, and is meant to sit
between reading a batch's shards and tokenizing them. It is off by default and not yet called by `token_blocks`
(see docs/corpus.md: the weight must be frozen per batch before producing, or exactly-once breaks).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from pydantic import BaseModel, Field

# (smallest cluster size, weight), ascending: FineWeb-2's published weights
FINEWEB2_WEIGHTS: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 3), (4, 3), (5, 5), (100, 8), (1000, 1))


class RehydrationConfig(BaseModel, frozen=True):
    enabled: bool = False
    weights: tuple[tuple[int, int], ...] = Field(default=FINEWEB2_WEIGHTS)
    count_near: bool = True  # near copies count toward the cluster size, as FineWeb-2's MinHash clusters do


def cluster_size(copies_exact: int | None, copies_near: int | None, count_near: bool = True) -> int:
    return 1 + int(copies_exact or 0) + (int(copies_near or 0) if count_near else 0)


OFF = RehydrationConfig()


def weight(size: int, config: RehydrationConfig = OFF) -> int:
    """How many times a document of a cluster of `size` appears (1 when rehydration is off)."""
    if not config.enabled:
        return 1
    chosen = 1
    for smallest, w in config.weights:
        if size >= smallest:
            chosen = w
    return chosen


def weight_table(copies: Mapping[str, tuple[int, int]], config: RehydrationConfig) -> dict[str, int]:
    """{doc_id: weight} from {doc_id: (exact copies, near copies)}."""
    return {d: weight(cluster_size(e, n, config.count_near), config) for d, (e, n) in copies.items()}


def rehydrate(records: Iterable[dict], weights: Mapping[str, int]) -> Iterator[dict]:
    """Each shard record `weights[id]` times (once if absent), the repeats right after it. Deterministic."""
    for record in records:
        for _ in range(max(1, int(weights.get(record["id"], 1)))):
            yield record
