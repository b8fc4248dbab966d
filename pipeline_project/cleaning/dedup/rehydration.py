"""Rehydration weights from duplicate-cluster counts (issue 31 item 4), FineWeb-2's rule.

FineWeb-2 removes all but one document of each duplicate cluster, keeps the cluster size, and "re-hydrates":
a kept document is repeated according to its cluster size N (huggingface/fineweb-2 README): N=1 once, N=2 or 3
N times, N=4 three times, 5 <= N < 100 five times, 100 <= N < 1000 eight times, N >= 1000 once (very large
clusters are assumed to be boilerplate or spam). Moderately duplicated text is upsampled, heavily duplicated
text is not.

Here N = 1 + exact copies + near copies, read from the batch's attribute file (`copies_exact`/`copies_near` as
recorded when the batch was cleaned), never from the live index: the weights are frozen per batch, so a re-run
or a retry of `token_blocks` produces the same blocks. `iter_weighted_documents` is the shard reader of the
token path with the weights attached: `(domain, text)` for a document seen once (today's stream, unchanged),
`(domain, text, weight)` for one to repeat; the tokenizer stage (`streaming.tokenize_produce`) tokenizes it once
and packs it `weight` times. `fingerprint` enters the ledger's fingerprint (as FIM's does).
"""

from __future__ import annotations

import hashlib
import json
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


def with_weights(records: Iterable[dict], weights: Mapping[str, int]) -> Iterator[tuple]:
    """Shard records as the token path's documents: `(domain, text)`, or `(domain, text, weight)` when the
    document repeats (`weights[id]` > 1)."""
    for rec in records:
        w = int(weights.get(rec["id"], 1))
        yield (rec.get("domain") or None, rec["text"], w) if w > 1 else (rec.get("domain") or None, rec["text"])


def batch_weights(client, bucket: str, manifest, config: RehydrationConfig) -> dict[str, int]:
    """{doc_id: weight} of the batch's kept documents that repeat (weight > 1), from its attribute file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not config.enabled:
        return {}
    if not getattr(manifest, "attributes", ""):
        raise ValueError(
            f"batch {manifest.batch_id}: no attribute file (cleaned before copy counts); re-clean it "
            "or produce it with rehydration off"
        )
    data = client.get_object(Bucket=bucket, Key=manifest.attributes)["Body"].read()
    if manifest.attributes_sha256 and hashlib.sha256(data).hexdigest() != manifest.attributes_sha256:
        raise ValueError(f"batch {manifest.batch_id}: {manifest.attributes} differs from the manifest's sha256")
    cols = ["doc_id", "decision", "copies_exact", "copies_near"]
    table = pq.read_table(pa.BufferReader(data), columns=cols).to_pydict()
    out = {}
    for doc, decision, exact, near in zip(*(table[c] for c in cols), strict=True):
        w = weight(cluster_size(exact, near, config.count_near), config) if decision == "kept" else 1
        if w > 1:
            out[doc] = w
    return out


def iter_weighted_documents(client, bucket: str, manifest, weights: Mapping[str, int]) -> Iterator[tuple]:
    """The batch's kept documents in shard order (as `publish.iter_shard_documents`), with their weights."""
    from pipeline_project.cleaning.output.shards import read_shard

    for entry in manifest.shards:
        data = client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()
        yield from with_weights(read_shard(data), weights)


def fingerprint(config: RehydrationConfig, weights: Mapping[str, int]) -> str:
    """ "" when off (the ledger fingerprint of a batch produced without it stays), else a sha256 prefix of the
    config and the batch's frozen weights: producing a batch again with other weights is refused as other content."""
    if not config.enabled:
        return ""
    body = json.dumps(
        {"config": config.model_dump(mode="json"), "weights": sorted(weights.items()), "v": 1},
        sort_keys=True,
        separators=(",", ":"),
    )
    return "rehydrate:" + hashlib.sha256(body.encode()).hexdigest()[:16]
