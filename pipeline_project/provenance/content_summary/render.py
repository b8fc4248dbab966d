"""The summary dict (`build.build_summary`) as Markdown, in the template's order."""

from __future__ import annotations

import json
from typing import Any

from pipeline_project.provenance.content_summary.build import CATEGORIES
from pipeline_project.provenance.content_summary.model import TBC


def _cell(v: Any) -> str:
    if v is None:
        return "not recorded"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True).replace("|", "\\|")
    return str(v).replace("|", "\\|")


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["_none_", ""]
    lines = [f"| {' | '.join(headers)} |", f"|{'---|' * len(headers)}"]
    lines += [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows]
    return [*lines, ""]


def _pick(rows: list[dict[str, Any]], keys: list[str]) -> list[list[Any]]:
    return [[r[k] for k in keys] for r in rows]


def _thresholds(section: str | None, values: Any) -> str:
    """A step's scalar settings (lists and tables, such as stop words, are in the JSON document only)."""
    if not section:
        return "-"
    if not isinstance(values, dict):
        return f"{section}: {_cell(values)}"
    flat = {k: v for k, v in values.items() if not isinstance(v, (dict, list, tuple))}
    more = len(values) - len(flat)
    return f"{section}: {_cell(flat)}" + (f" (+{more} lists, in the JSON)" if more else "")


def _mark(v: Any) -> str:
    return f"**{TBC}**" if v == TBC else _cell(v)


DOC_KEYS = ["in", "kept", "dropped", "quarantined"]
SOURCE_HEADERS = ["prefix", "category", "objects", "bytes", "last_modified from", "to", *DOC_KEYS]
RETRACTION_KEYS = ["request", "kind", "reason", "blocks", "whole_messages", "passed_over", "trained_before"]
ACCOUNTING_KEYS = ["batch", *DOC_KEYS, "balanced", "records_match", "trained_blocks", "produced_blocks", "retired"]


def _general(s: dict[str, Any]) -> list[str]:
    scope, gen = s["scope"], s["1_general_information"]
    facts = [["provider", _mark(gen["provider"])], ["model", _mark(gen["model"])], ["contact", _mark(gen["contact"])]]
    facts += [["checkpoint lineage", gen["checkpoint_lineage"]], ["modalities", ", ".join(gen["modalities"])]]
    facts += [[k.replace("_", " "), v] for k, v in gen["size"].items()]
    domain_keys = ["domain", "kept_documents", "tokens", "blocks", "fim_documents"]
    return [
        f"# Training-content summary: {scope['lineage']} at step {scope['checkpoint_step']}",
        "",
        f"{s['template']}. Generated {s['generated_at']} from the pipeline's records; "
        f"fields marked **{TBC}** are not known to the pipeline.",
        "",
        f"Checkpoint `{scope['checkpoint_uri']}` ({scope['checkpoint_created_at']}), topic `{scope['topic']}`, "
        f"{len(scope['batches'])} batches, from {scope['batches_from']} ({scope['checkpoints_read']} checkpoints "
        f"read; {scope['unattributed_blocks']} trained blocks in no ledger record).",
        "",
        "## 1. General information",
        "",
        *_table(["field", "value"], facts),
        "### Languages (kept documents; tokens per language are not recorded)",
        "",
        *_table(["language", "kept documents"], _pick(gen["languages"], ["language", "kept_documents"])),
        "### Domains (cleaning profiles)",
        "",
        *_table(
            ["domain", "kept documents", "tokens produced", "blocks", "FIM documents"],
            _pick(gen["domains"], domain_keys),
        ),
    ]


def _sources(src: dict[str, Any]) -> list[str]:
    rows = [
        [r["prefix"], _mark(r["category"]), r["objects"], r["bytes"], r["first_modified"], r["last_modified"]]
        + [r["documents"][k] for k in DOC_KEYS]
        for r in src["sources"]
    ]
    out = [
        "## 2. List of data sources",
        "",
        "Every raw S3 prefix the batches trained on were read from; whether a prefix is a public dataset, a private "
        "one, crawled data, user data or synthetic data is the provider's to say.",
        "",
        *_table(SOURCE_HEADERS, rows),
    ]
    for k, v in CATEGORIES.items():
        value = src[f"{k}_{v.replace(' ', '_')}"]
        out += [f"- **{k} {v}**: {_mark(value) if value == TBC else ', '.join(f'`{p}`' for p in value)}"]
    return [*out, ""]


def _processing(s: dict[str, Any]) -> list[str]:
    proc = s["3_data_processing"]
    rights, filt = proc["3.1_reservation_of_rights"], proc["3.2_illegal_content_and_filtering"]
    steps = [
        [f["step"], f["documents"], f["by_reason"], _thresholds(f["config_section"], f["thresholds"])]
        for f in filt["filters"]
    ]
    configs = ", ".join(f"`{h[:16]}`" for h in proc["cleaning_configs"]) or "none recorded"
    return [
        "## 3. Data processing aspects",
        "",
        "### 3.1 Respect of reservation of rights (opt-outs)",
        "",
        f"- Opt-outs at collection (robots.txt, TDM reservations): {_mark(rights['collection_opt_outs'])}",
        f"- Takedown requests honoured in training (retractions): {_cell(rights['takedowns'] or 0)}",
        f"- Documents dropped at cleaning as `blocked:<request>`: {_cell(rights['takedown_documents_blocked'] or 0)}",
        "",
        "### 3.2 Removal of illegal content and other filtering",
        "",
        f"- Measures against illegal content: {_mark(filt['illegal_content_measures'])}",
        f"- Deduplication (documents dropped as copies): {_cell(filt['deduplication'] or 0)}",
        f"- Decontamination (documents dropped, by benchmark): {_cell(filt['decontamination'] or 0)}",
        f"- Quarantined (unreadable, unsupported or malformed input): {filt['quarantined']}",
        f"- Fill-in-the-middle: {_cell(filt['fim'] or 'off')}",
        f"- Cleaning configs used: {configs} (whole, in the JSON document)",
        "",
        *_table(["step", "documents removed", "by reason", "thresholds"], steps),
        "#### Retractions (blocks kept out of training after production)",
        "",
        *_table(
            [k.replace("_", " ") for k in RETRACTION_KEYS], _pick(filt["retractions"]["requests"], RETRACTION_KEYS)
        ),
        "## Accounting per batch",
        "",
        *_table([k.replace("_", " ") for k in ACCOUNTING_KEYS], _pick(s["accounting"], ACCOUNTING_KEYS)),
    ]


def render_markdown(s: dict[str, Any]) -> str:
    return "\n".join([*_general(s), *_sources(s["2_data_sources"]), *_processing(s)])
