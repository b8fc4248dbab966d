"""Near-duplicate quality of our MinHashDedup step against connected components over our LSH bands and over
DataTrove's, on generated near-duplicates (part of `cleaning_vs_datatrove.py`; runs in its venv)."""

from __future__ import annotations

import random
import time
from itertools import combinations


def _edit(words, rate, rng):
    return [w if rng.random() >= rate else rng.choice(("zebra", "quartz", "nimbus", "ochre")) for w in words]


def make_near_dups(docs, n_base, rates, seed=0):
    rng = random.Random(seed)
    bases = [
        d for d in docs if d.source.startswith(("web_noisy", "en_gutenberg/")) and 400 < len(d.text.split()) < 20000
    ]
    rng.shuffle(bases)
    items = []
    for b, doc in enumerate(bases[:n_base]):
        words = doc.text.split()[:1500]
        items.append((b, 0.0, " ".join(words)))
        for rate in rates:
            items.append((b, rate, " ".join(_edit(words, rate, rng))))
    return items


def _jaccard(a, b):
    return len(a & b) / len(a | b) if a or b else 0.0


def _clusters_from_bands(band_rows, sigs=None, verify=None):
    parent = list(range(len(band_rows)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    seen = {}
    for i, bands in enumerate(band_rows):
        for key in bands:
            j = seen.setdefault(key, i)
            if j != i and (verify is None or float((sigs[i] == sigs[j]).mean()) >= verify):
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
    return [find(i) for i in range(len(band_rows))]


def _step_roots(items, minhash_cfg):
    """Run our real MinHashDedup step over the items; each document's root is the document it was dropped for."""
    from pipeline_project.cleaning.records import Document
    from pipeline_project.cleaning.steps.base import RunContext, StepStats
    from pipeline_project.cleaning.steps.dedup import MinHashDedup

    docs = [Document(f"n{i}", text, "bench", {"lang": "en"}) for i, (_, _, text) in enumerate(items)]
    stats = StepStats("minhash_dedup")
    t0 = time.process_time()
    _, dropped = MinHashDedup(minhash_cfg).run(docs, RunContext("bench"), stats)
    cpu = time.process_time() - t0
    roots = list(range(len(docs)))
    for d in dropped:
        roots[int(d.id[1:])] = int(d.reason.rsplit("/", 1)[1][1:])
    return roots, cpu, stats.notes


def near_dup_quality(items, truth_jaccard=0.7, seeds=(1, 2, 3, 4, 5)):
    from pipeline_project.cleaning import CleaningConfig
    from pipeline_project.cleaning.steps.dedup import MinHasher

    default = CleaningConfig().dedup.minhash
    shingle_sets = [set(MinHasher(default).shingles(t, "en")) for _, _, t in items]
    judge = _Judge(items, shingle_sets, truth_jaccard)
    out = {
        "docs": len(items),
        "truth_pairs": len(judge.truth),
        "truth_rule": f"5-gram shingle Jaccard >= {truth_jaccard}",
    }
    sweep = {"ours": [], "ours_lsh_components": [], "datatrove": []}
    for seed in seeds:
        row = _seed_row(items, default, seed, judge)
        if seed == default.seed:
            out.update(row)
        for impl in sweep:
            sweep[impl].append({"seed": seed, **{k: row[impl][k] for k in ("precision", "recall", "tp", "fp", "fn")}})
    out["seed_sweep"] = {impl: _sweep_summary(rows, seeds) for impl, rows in sweep.items()}
    return out


def _our_bands(items, cfg, seed):
    from pipeline_project.cleaning.steps.dedup import MinHasher

    hasher = MinHasher(cfg.model_copy(update={"seed": seed}))
    t0 = time.process_time()
    bands = []
    for _, _, text in items:
        sig = hasher.signature(text, "en")
        bands.append(sig[1].tolist() if sig is not None else [])
    return bands, time.process_time() - t0


def _dt_bands(items, seed):
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature

    dt = MinhashDedupSignature(output_folder="/tmp/dt_minhash_unused", config=MinhashConfig(seed=seed))
    t0 = time.process_time()
    bands = []
    for _, _, text in items:
        sh = dt.get_shingles(text)
        sig = dt.get_signature(sh) if sh.size else []
        bands.append([(b, tuple(row)) for b, row in enumerate(sig)])
    return bands, time.process_time() - t0


class _Judge:
    """The true near-duplicate pairs of `items` (within a base, shingle Jaccard >= `truth_jaccard`), and how a
    clustering (each document's root) fares against them."""

    def __init__(self, items, shingle_sets, truth_jaccard):
        self.items, self.shingle_sets, self.truth_jaccard = items, shingle_sets, truth_jaccard
        self.by_base = {}
        for i, (b, _, _) in enumerate(items):
            self.by_base.setdefault(b, []).append(i)
        self.truth = {
            (i, j)
            for members in self.by_base.values()
            for i, j in combinations(members, 2)
            if _jaccard(shingle_sets[i], shingle_sets[j]) >= truth_jaccard
        }

    def evaluate(self, roots):
        import numpy as np

        items, truth = self.items, self.truth
        # a cluster claims all its members are near-duplicates of each other: every pair in it is predicted
        groups = {}
        for i, r in enumerate(roots):
            groups.setdefault(r, []).append(i)
        predicted = {p for g in groups.values() for p in combinations(g, 2)}
        # a predicted pair across bases only counts as true if it really is that similar
        tp = len(predicted & truth) + sum(
            1
            for i, j in predicted - truth
            if items[i][0] != items[j][0] and _jaccard(self.shingle_sets[i], self.shingle_sets[j]) >= self.truth_jaccard
        )
        fp, fn = len(predicted) - tp, len(truth - predicted)
        per_rate = {}
        for i, (b, rate, _) in enumerate(items):
            if rate:
                base_i = self.by_base[b][0]
                per_rate.setdefault(rate, []).append(roots[i] == roots[base_i])
        return {
            "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
            "recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "detected_by_edit_rate": {str(r): round(float(np.mean(v)), 3) for r, v in sorted(per_rate.items())},
        }


def _seed_row(items, default, seed, judge):
    """Our step, our bands' components and DataTrove's for one hash seed (and our signature-only verify at the
    default seed)."""
    bands, sig_cpu = _our_bands(items, default, seed)
    roots, step_cpu, notes = _step_roots(items, default.model_copy(update={"seed": seed}))
    row = {
        "ours": {
            **judge.evaluate(roots),
            "signature_cpu_s": round(sig_cpu, 3),
            "dedup_step_cpu_s": round(step_cpu, 3),
            "candidates": notes,
        },
        "ours_lsh_components": {**judge.evaluate(_clusters_from_bands(bands)), "signature_cpu_s": round(sig_cpu, 3)},
    }
    dtb, dt_cpu = _dt_bands(items, seed)
    row["datatrove"] = {**judge.evaluate(_clusters_from_bands(dtb)), "signature_cpu_s": round(dt_cpu, 3)}
    if seed == default.seed:
        sroots, scpu, _snotes = _step_roots(items, default.model_copy(update={"verify": "signature"}))
        row["ours_verify_signature"] = {
            **judge.evaluate(sroots),
            "signature_cpu_s": round(sig_cpu, 3),
            "dedup_step_cpu_s": round(scpu, 3),
        }
    return row


def _sweep_summary(rows, seeds):
    import numpy as np

    return {
        "seeds": list(seeds),
        "mean_precision": round(float(np.mean([r["precision"] for r in rows])), 4),
        "mean_recall": round(float(np.mean([r["recall"] for r in rows])), 4),
        "min_precision": min(r["precision"] for r in rows),
        "min_recall": min(r["recall"] for r in rows),
        "runs": rows,
    }
