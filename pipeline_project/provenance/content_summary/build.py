"""The training-content summary as a JSON-able dict, from `SummaryInputs`: pure, no store read.

Sections follow the European Commission's template for the public summary of training content (Art. 53(1)(d) of
the AI Act, July 2025): 1 general information, 2 list of data sources (2.1 publicly available datasets, 2.2
private datasets, 2.3 data crawled and scraped, 2.4 user data, 2.5 synthetic data, 2.6 other), 3 data
processing aspects (3.1 respect of reservation of rights, 3.2 removal of illegal content and other filtering).
What the pipeline records is filled with its figures; what it cannot know is `TBC`, never guessed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timezone
from typing import Any

from pipeline_project.provenance.content_summary.model import TBC, TEMPLATE, BatchInput, DocKey, SummaryInputs

DECISIONS = ("kept", "dropped", "quarantined")
DUP_REASONS = {"exact_duplicate_of": "exact", "near_duplicate_of": "near"}
CATEGORIES = {
    "2.1": "publicly available datasets",
    "2.2": "private datasets",
    "2.3": "data crawled and scraped",
    "2.4": "user data",
    "2.5": "synthetic data",
    "2.6": "other sources",
}
# the cleaning step -> the section of `CleaningConfig` that holds its thresholds
STEP_CONFIG = {
    "read": "reader",
    "encoding_repair": "encoding",
    "boilerplate_strip": "boilerplate",
    "language_id": "language",
    "gopher_quality": "gopher_quality",
    "gopher_repetition": "gopher_repetition",
    "c4": "c4",
    "fineweb": "fineweb",
    "pii": "pii",
    "exact_dedup": "dedup",
    "minhash_dedup": "dedup",
    "index_commit": "dedup",
    "decontaminate": "decontamination",
    "code_quality": "profiles",
    "secrets": "profiles",
}


def source_prefix(key: str, raw_prefix: str, depth: int) -> str:
    """The source an object belongs to: its prefix `depth` levels under `raw_prefix` (`raw/web/` for
    `raw/web/en/a.txt` at depth 1); an object higher up belongs to the prefix it sits in."""
    base = raw_prefix if key.startswith(raw_prefix) else ""
    parts = key[len(base) :].split("/")[:-1]  # the folders under the base, without the file name
    return base + "".join(f"{p}/" for p in parts[:depth])


def _tally(batches: list[BatchInput]) -> Counter[DocKey]:
    total: Counter[DocKey] = Counter()
    for b in batches:
        total.update(b.tally or {})
    return total


def _by_decision(tally: Counter[DocKey]) -> Counter[str]:
    out: Counter[str] = Counter()
    for k, n in tally.items():
        out[k.decision] += n
    return out


def _decisions(counter: Counter[str]) -> dict[str, int]:
    out = {"in": sum(counter.values()), **{d: counter[d] for d in DECISIONS}}
    out["balanced"] = out["in"] == sum(out[d] for d in DECISIONS)
    return out


def accounting(batches: list[BatchInput]) -> list[dict[str, Any]]:
    """Per batch: the shard manifest's counts, the documents the per-document records hold, and whether each adds
    up (in == kept + dropped + quarantined) and the two agree."""
    rows = []
    for b in sorted(batches, key=lambda b: b.batch_id):
        counts = b.counts or {}
        tallied = _decisions(_by_decision(b.tally or Counter()))
        row = {
            "batch": b.batch_id,
            "in": counts.get("in"),
            **{d: counts.get(d) for d in DECISIONS},
            "balanced": bool(counts) and counts.get("in") == sum(counts.get(d, 0) for d in DECISIONS),
            "records_match": b.tally is not None and all(tallied[k] == counts.get(k) for k in ("in", *DECISIONS)),
            "trained_blocks": b.trained_blocks,
            "produced_blocks": (b.produced or {}).get("blocks"),
            "retired": b.retired,
        }
        rows.append(row)
    return rows


def sources(inp: SummaryInputs) -> list[dict[str, Any]]:
    """Per source prefix: objects, bytes, the range of their last_modified, and its documents by decision."""
    objects: dict[str, dict[str, Any]] = {}
    for b in inp.batches:
        for o in b.objects:
            objects[o.key] = {"size": o.size, "last_modified": o.last_modified}
    by_prefix: dict[str, dict[str, Any]] = defaultdict(lambda: {"objects": 0, "bytes": 0, "modified": []})
    for key, o in objects.items():
        row = by_prefix[source_prefix(key, inp.raw_prefix, inp.source_depth)]
        row["objects"] += 1
        row["bytes"] += o["size"]
        row["modified"].append(o["last_modified"])
    docs: dict[str, Counter[str]] = defaultdict(Counter)
    for k, n in _tally(inp.batches).items():
        docs[source_prefix(k.source, inp.raw_prefix, inp.source_depth)][k.decision] += n
    out = []
    for prefix in sorted(set(by_prefix) | set(docs)):
        row = by_prefix[prefix]
        category = inp.provider.source_categories.get(prefix, "")
        out.append(
            {
                "prefix": prefix,
                "category": f"{category} {CATEGORIES.get(category, '')}".strip() if category else TBC,
                "objects": row["objects"],
                "bytes": row["bytes"],
                "first_modified": min(row["modified"]) if row["modified"] else None,
                "last_modified": max(row["modified"]) if row["modified"] else None,
                "documents": _decisions(docs[prefix]),
            }
        )
    return out


def domains(batches: list[BatchInput]) -> list[dict[str, Any]]:
    """Per cleaning profile: kept documents (cleaning records) and the tokens, blocks and FIM documents the ledger
    records for the batches trained on."""
    kept: Counter[str] = Counter()
    for k, n in _tally(batches).items():
        if k.decision == "kept":
            kept[k.domain or "(none)"] += n
    produced: dict[str, Counter[str]] = defaultdict(Counter)
    for b in batches:
        for d, c in ((b.produced or {}).get("domains") or {}).items():
            produced[d].update({k: int(v) for k, v in c.items() if isinstance(v, (int, float))})
    return [
        {
            "domain": d,
            "kept_documents": kept.get(d, 0),
            "tokens": produced[d].get("tokens", 0) if d in produced else None,
            "blocks": produced[d].get("blocks", 0) if d in produced else None,
            "fim_documents": produced[d].get("fim_docs") if d in produced else None,
        }
        for d in sorted(set(kept) | set(produced))
    ]


def languages(batches: list[BatchInput]) -> list[dict[str, Any]]:
    kept: Counter[str] = Counter()
    for k, n in _tally(batches).items():
        if k.decision == "kept":
            kept[k.lang or "(none)"] += n
    return [{"language": lang, "kept_documents": n} for lang, n in kept.most_common()]


def filters(inp: SummaryInputs) -> list[dict[str, Any]]:
    """Per step that removed documents: its thresholds (from the configs used) and the documents by reason."""
    removed: dict[str, Counter[str]] = defaultdict(Counter)
    for k, n in _tally(inp.batches).items():
        if k.decision != "kept":
            removed[k.step or "(unknown)"][k.reason or "(none)"] += n
    out = []
    for step in sorted(removed):
        section = STEP_CONFIG.get(step)
        thresholds = [cfg.get(section) for cfg in inp.configs.values()] if section else []
        out.append(
            {
                "step": step,
                "documents": sum(removed[step].values()),
                "by_reason": dict(removed[step].most_common()),
                "config_section": section,
                "thresholds": thresholds[0] if len(thresholds) == 1 else thresholds or None,
            }
        )
    return out


def _reason_total(inp: SummaryInputs, test) -> Counter[str]:
    out: Counter[str] = Counter()
    for k, n in _tally(inp.batches).items():
        if k.decision != "kept" and test(k.reason):
            out[k.reason] += n
    return out


def retractions(inp: SummaryInputs) -> dict[str, Any]:
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for r in inp.retractions:
        by_kind[r.kind].update(
            {
                "requests": 1,
                "blocks": r.blocks,
                "whole_messages": r.whole_messages,
                "passed_over": r.passed_over,
                "trained_before": r.trained_before,
            }
        )
    return {
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "requests": [
            {
                "request": r.request_id,
                "kind": r.kind,
                "reason": r.reason,
                "blocks": r.blocks,
                "whole_messages": r.whole_messages,
                "passed_over": r.passed_over,
                "trained_before": r.trained_before,
            }
            for r in sorted(inp.retractions, key=lambda r: r.request_id)
        ],
    }


BATCHES_FROM = (
    "the checkpoint's step logs (provenance/steps.json, walked back through `previous`): the Kafka messages every "
    "rank trained, each attributed to the ledger record whose offsets hold it"
)


def general(inp: SummaryInputs) -> dict[str, Any]:
    """Section 1: who and what (the provider's), the modality and the size of the data (the pipeline's)."""
    decided = _decisions(_by_decision(_tally(inp.batches)))
    trained_blocks = sum(b.trained_blocks for b in inp.batches) + inp.unattributed_blocks
    objects = {o.key: o.size for b in inp.batches for o in b.objects}
    p = inp.provider
    return {
        "provider": p.provider or TBC,
        "model": p.model or TBC,
        "contact": p.contact or TBC,
        "checkpoint_lineage": inp.lineage,
        "modalities": ["text"],
        "size": {
            "raw_objects": len(objects),
            "raw_bytes": sum(objects.values()),
            "documents_in": decided["in"],
            "documents_kept": decided["kept"],
            "tokens_produced": sum(int((b.produced or {}).get("tokens", 0)) for b in inp.batches),
            "blocks_trained": trained_blocks,
            "tokens_trained": trained_blocks * inp.seq_len,  # whole blocks: padding of a batch's tail included
            "seq_len": inp.seq_len,
        },
        "languages": languages(inp.batches),
        "domains": domains(inp.batches),
    }


def processing(inp: SummaryInputs) -> dict[str, Any]:
    """Section 3: opt-outs and takedowns (3.1), filtering, dedup, decontamination and retractions (3.2)."""
    p = inp.provider
    dups = _reason_total(inp, lambda r: r in DUP_REASONS)
    decontam = _reason_total(inp, lambda r: r.startswith("decontaminated"))
    retracted = retractions(inp)
    return {
        "3.1_reservation_of_rights": {
            "collection_opt_outs": p.crawler_opt_out_policy or TBC,
            "takedown_documents_blocked": dict(_reason_total(inp, lambda r: r.startswith("blocked"))),
            "takedowns": retracted["by_kind"].get("takedown", {}),
        },
        "3.2_illegal_content_and_filtering": {
            "illegal_content_measures": p.illegal_content_measures or TBC,
            "filters": filters(inp),
            "deduplication": {DUP_REASONS[r]: n for r, n in dups.items()},
            "decontamination": {r.partition(":")[2] or r: n for r, n in decontam.items()},
            "fim": inp.fim,
            "quarantined": _by_decision(_tally(inp.batches))["quarantined"],
            "retractions": retracted,
        },
        "cleaning_configs": inp.configs,
    }


def build_summary(inp: SummaryInputs, generated_at: str | None = None) -> dict[str, Any]:
    """The summary document; `accounting` and every source's `documents.balanced` say whether the counts add up."""
    src = sources(inp)
    by_category = {
        f"{k}_{v.replace(' ', '_')}": [s["prefix"] for s in src if s["category"].startswith(k)] or TBC
        for k, v in CATEGORIES.items()
    }
    return {
        "template": TEMPLATE,
        "generated_at": generated_at or datetime.now(timezone.utc).isoformat(),
        "scope": {
            "lineage": inp.lineage,
            "checkpoint_step": inp.checkpoint_step,
            "checkpoint_uri": inp.checkpoint_uri,
            "checkpoint_created_at": inp.checkpoint_created_at,
            "topic": inp.topic,
            "batches": sorted(b.batch_id for b in inp.batches),
            "batches_from": BATCHES_FROM,
            "checkpoints_read": inp.steps_read,
            "unattributed_blocks": inp.unattributed_blocks,
        },
        "1_general_information": general(inp),
        "2_data_sources": {"sources": src, **by_category},
        "3_data_processing": processing(inp),
        "accounting": accounting(inp.batches),
    }


def adds_up(summary: dict[str, Any]) -> bool:
    """Every batch's documents add up (in == kept + dropped + quarantined) and its per-document records agree with
    its shard manifest, and the sources' documents add up to the batches' (none lost between the two views)."""
    rows = summary["accounting"]
    srcs = summary["2_data_sources"]["sources"]
    per_batch = all(r["balanced"] and r["records_match"] for r in rows)
    same = all(sum(s["documents"][k] for s in srcs) == sum(r[k] or 0 for r in rows) for k in ("in", *DECISIONS))
    return per_batch and same and all(s["documents"]["balanced"] for s in srcs)
