"""The markdown report of `cleaning_vs_datatrove.py` and the load average beside each of its sections."""

from __future__ import annotations

import os


def measured(res: dict, section: str, fn, *args):
    """Run one section, recording the 1-minute load average at its start and end (printed beside its table)."""
    start = os.getloadavg()[0]
    out = fn(*args)
    res.setdefault("load_average", {})[section] = [round(start, 2), round(os.getloadavg()[0], 2)]
    return out


def _load(res: dict, section: str) -> list[str]:
    la = res.get("load_average", {}).get(section)
    return [f"Load average (1 min) {la[0]} at the start, {la[1]} at the end.", ""] if la else []


def markdown(res) -> str:
    sections = (_agreement, _near_dup, _throughput, _scaling, _index_cost)
    return "\n".join(line for section in sections for line in section(res))


def _agreement(res) -> list[str]:
    lines = [
        "### Agreement with DataTrove 0.10.1 (same text, English mode, keep/drop per document)",
        "",
        *_load(res, "agreement"),
        "| step | docs | agreement | disagreement classes (count) |",
        "|---|---:|---:|---|",
    ]
    for name, a in res["agreement"].items():
        classes = "; ".join(f"{k}: {v}" for k, v in list(a["disagreements"].items())[:5]) or "-"
        lines.append(f"| {name} | {a['docs']} | {a['agreement']:.2%} | {classes} |")
    return lines


def _near_dup(res) -> list[str]:
    nd = res["near_dup"]
    lines = [
        "",
        f"### Near-duplicate detection ({nd['docs']} docs, truth: {nd['truth_rule']}, {nd['truth_pairs']} true pairs)",
        "",
        *_load(res, "near_dup"),
        "| impl | precision | recall | detected at edit rate | signature CPU s |",
        "|---|---:|---:|---|---:|",
    ]
    for impl in ("ours", "ours_verify_signature", "ours_lsh_components", "datatrove"):
        r = nd[impl]
        det = ", ".join(f"{k}: {v}" for k, v in r["detected_by_edit_rate"].items())
        lines.append(f"| {impl} | {r['precision']} | {r['recall']} | {det} | {r['signature_cpu_s']} |")
    if "seed_sweep" not in nd:
        return lines
    seeds = nd["seed_sweep"]["ours"]["seeds"]
    lines += [
        "",
        f"Same pairs, hash seeds {seeds[0]}..{seeds[-1]} on both sides:",
        "",
        "| impl | mean precision | mean recall | min precision | min recall | precision per seed | recall per seed |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for impl, r in nd["seed_sweep"].items():
        lines.append(
            f"| {impl} | {r['mean_precision']} | {r['mean_recall']} | {r['min_precision']} | {r['min_recall']} | "
            f"{' '.join(str(x['precision']) for x in r['runs'])} | {' '.join(str(x['recall']) for x in r['runs'])} |"
        )
    return lines


def _throughput(res) -> list[str]:
    t = res["throughput"]
    return [
        "",
        f"### Throughput per core ({t['docs']} docs, {t['mb']} MB; ftfy + Gopher rep + Gopher quality + C4 + FineWeb + MinHash)",
        "",
        *_load(res, "throughput"),
        "| impl | CPU s | docs/s | MB/s |",
        "|---|---:|---:|---:|",
        f"| ours | {t['ours']['cpu_s']} | {t['ours']['docs_per_s']} | {t['ours']['mb_per_s']} |",
        f"| datatrove | {t['datatrove']['cpu_s']} | {t['datatrove']['docs_per_s']} | {t['datatrove']['mb_per_s']} |",
        f"| **speedup** | | | **{t['speedup']}x** |",
    ]


def _scaling(res) -> list[str]:
    lines = [
        "",
        "### Scaling (whole chain, one process)",
        "",
        *_load(res, "scaling"),
        "| factor | docs | MB | CPU s | MB/s | peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["scaling"]:
        lines.append(
            f"| {r['factor']}x | {r['docs']} | {r['mb']} | {r['cpu_s']} | {r['mb'] / r['cpu_s']:.3f} | {r['peak_rss_mb']} |"
        )
    return lines


def _index_cost(res) -> list[str]:
    lines = [
        "",
        "### Cross-batch index growth (dedup only, each batch = corpus sample with 20% words changed)",
        "",
        *_load(res, "index_cost"),
        "| batch | index entries before | dedup s | index bytes/doc | serialized MB | serialize s | cross-batch drops |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["index_cost"]:
        lines.append(
            f"| {r['batch']} | {r['index_entries_before']} | {r['dedup_wall_s']} | {r['index_bytes_per_doc']} | "
            f"{r['serialized_mb']} | {r['serialize_cpu_s']} | {r['cross_batch_drops']} |"
        )
    return lines
