"""Cleaning profiles on the shared corpus, side by side with DataTrove 0.10.1 configured the same way.

Installs nothing; runs in bench/.venv-datatrove (how to build it: bench/cleaning_vs_datatrove.py):

    bench/.venv-datatrove/bin/python bench/cleaning_profiles.py            # every document of the folders
    bench/.venv-datatrove/bin/python bench/cleaning_profiles.py --quick    # at most 1500 documents per file
    bench/.venv-datatrove/bin/python bench/cleaning_profiles.py --decontaminate --skip agreement cost before
        # keep rates with benchmark decontamination on (HumanEval, the default set); the documents
        # it drops are listed -> bench/results/cleaning_profiles_decontam.json

Measures, on ../shared/corpus (en_gutenberg, en_gutenberg_latin1, en_tinyshakespeare, zh_classical,
zh_reviews, code, web_noisy; .txt and .jsonl, read by our reader):

1. keep rate and removal reasons per folder and per profile: the whole corpus as one batch through
   `CleaningPipeline(CleaningConfig())`, and through the chain of before (`profiles.enabled=False`);
2. keep/drop agreement per profile with DataTrove: the documents each profile's language_id step kept (the
   text as it enters the quality filters, so both sides judge the same text with the same language), through
   our filters and through DataTrove's configured the same way, each in its chain's order:
     en_web  GopherRepetition, GopherQuality (our stop words per language), C4 (no terminal-punct rule),
             FineWebQuality, each with the document's language
     zh_web  FineWeb-2 `fineweb-2-pipeline.py` with `configs/cmn_Hani.yml` (values copied below, not read
             from our config): GopherRepetition, FineWebQuality, GopherQuality, language "cmn_Hani"
     code    DataTrove has no code filters; LambdaFilters written here from the StarCoder2 paper's text
             (section 2.1) with bigcode's line statistics. DataTrove has no go-enry is_generated, so ours
             adds those rules and they show as disagreement
     books   GopherRepetition (line / paragraph rules off) and GopherQuality with the books thresholds
   Language ID is not compared (DataTrove downloads its fastText model; no network here);
3. what profile selection costs: CPU seconds of the same documents routed, and run through each profile's
   chain directly (the grouping known in advance), alternating, best of --reps.

Prints markdown and writes bench/results/cleaning_profiles.json. Times are process CPU seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench_results import host, load_line  # bench/ is not a package: the script's folder is on sys.path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RESULTS = ROOT / "bench" / "results" / "cleaning_profiles.json"
RESULTS_DECONTAM = ROOT / "bench" / "results" / "cleaning_profiles_decontam.json"
FOLDERS = (
    *("en_gutenberg", "en_gutenberg_latin1", "en_tinyshakespeare"),
    *("zh_classical", "zh_reviews", "code", "web_noisy"),
)

# FineWeb-2 configs/cmn_Hani.yml and the fixed arguments of fineweb-2-pipeline.py, as published
FW2_CMN = {
    "dup_line_frac": 0.287,
    "dup_n_grams": [[5, 0.198], [6, 0.182], [7, 0.167], [8, 0.154], [9, 0.14], [10, 0.127]],
    "top_n_grams": [[2, 0.256], [3, 0.201], [4, 0.171]],
    "language_score": 0.692,
    "line_punct_thr": 0.106,
    "max_avg_word_length": 5,
    "min_avg_word_length": 1,
    "max_non_alpha_words_ratio": 0.735,
    "new_line_ratio": 0.178,
    "stopwords": list("的年在月是和日了於·為有被人中为他與後也而由"),
}


def load(per_file: int | None):
    from pipeline_project.cleaning import CleaningConfig, Document, read_object

    cfg, docs = CleaningConfig(), []
    for folder in FOLDERS:
        for path in sorted((CORPUS / folder).rglob("*")):
            if path.suffix in (".txt", ".jsonl") and path.is_file():
                items = read_object(str(path.relative_to(CORPUS)), path.read_bytes(), cfg)
                docs += [d for d in items if isinstance(d, Document)][:per_file]
    return docs


def folder_of(doc) -> str:
    return doc.source.split("/", 1)[0]


# --------------------------------------------------------------------------- 1. keep rates
def keep_rates(docs, config):
    from pipeline_project.cleaning.chain.chain import CleaningPipeline

    start = time.process_time()
    pipeline = CleaningPipeline(config)
    result = pipeline.finish(pipeline.start(copy.deepcopy(docs), "bench"))  # one chunk, no index
    seconds = time.process_time() - start
    print(f"keep rates, profiles {'on' if config.profiles.enabled else 'off'}: {seconds:.0f} CPU s", file=sys.stderr)
    kept = Counter(folder_of(d) for d in result.kept)
    total = Counter(folder_of(d) for d in docs)
    reasons: dict[str, Counter] = defaultdict(Counter)
    by_profile: dict[str, Counter] = defaultdict(Counter)
    routed: dict[str, Counter] = defaultdict(Counter)
    for d in result.dropped:
        reasons[folder_of(d)][f"{d.meta.get('domain')}/{d.step}:{d.reason.split(':', 1)[0]}"] += 1
        by_profile[d.meta.get("domain")][f"{d.step}:{d.reason.split(':', 1)[0]}"] += 1
    for d in result.kept + result.dropped:
        routed[folder_of(d)][d.meta.get("domain")] += 1
    folders = {
        f: {
            "docs": total[f],
            "kept": kept[f],
            "keep_rate": round(kept[f] / total[f], 4) if total[f] else 0.0,
            "routed": dict(routed[f].most_common()),
            "top_reasons": dict(reasons[f].most_common(6)),
        }
        for f in FOLDERS
    }
    profiles = {
        name: {**c, "keep_rate": round(c["kept"] / c["in"], 4) if c["in"] else 0.0, "reasons": dict(by_profile[name])}
        for name, c in result.profile_counts().items()
    }
    if "zh_web" in profiles:  # FineWeb-2 keeps nothing under 50 words: how do the documents long enough fare?
        profiles["zh_web"]["min_words"] = long_enough(docs, result, config)
    select = next((s for s in result.step_stats if s.name == "profile_select"), None)
    chain = sum(s.seconds for s in result.step_stats if s.profile)
    out = {"seconds": round(seconds, 2), "folders": folders, "profiles": profiles}
    if config.decontamination.enabled:
        out["decontaminated"] = decontaminated(result)
    if select is not None:
        out["profile_select_s"], out["chain_s"] = round(select.seconds, 3), round(chain, 3)
    return out, result


def decontaminated(result):
    """The documents the decontaminate step dropped: per profile, and each with its benchmark."""
    hits = [d for d in result.dropped if d.step == "decontaminate"]
    return {
        "by_profile": dict(Counter(d.meta.get("domain") for d in hits)),
        "by_folder": dict(Counter(folder_of(d) for d in hits)),
        "docs": [{"id": d.id, "domain": d.meta.get("domain"), "reason": d.reason} for d in hits],
    }


def long_enough(docs, result, config):
    from pipeline_project.cleaning.steps.text import is_word, split_words

    least = config.profiles.zh_web.gopher_quality.min_doc_words
    text = {d.id: d.text for d in docs}
    kept = {d.id for d in result.kept if d.meta.get("domain") == "zh_web"}
    routed = [d.id for d in result.kept + result.dropped if d.meta.get("domain") == "zh_web"]
    long = [i for i in routed if sum(1 for w in split_words(text[i], "zh") if is_word(w)) >= least]
    n_kept = sum(1 for i in long if i in kept)
    return {"min_words": least, "docs": len(long), "kept": n_kept, "keep_rate": round(n_kept / max(len(long), 1), 4)}


# --------------------------------------------------------------------------- 2. agreement with DataTrove
_B64 = re.compile(r"[a-zA-Z0-9+/\n=]{64,}")
_HEX = re.compile(r"(?:\b(?:0x|\\x)?[0-9a-fA-F]{2}(?:,|\b\s*)){8,}")
_UNI = re.compile(r"(?:\\u[0-9a-fA-F]{4}){8,}")
_EXEMPT = {"html", "json", "markdown", "roff", "roff manpage", "smt", "tex", "text", "xml"}
_PHRASES = ("auto-generated", "autogenerated", "automatically generated", "generated automatically")
_PHRASES += ("this file is generated",)


def starcoder2_filters():
    """StarCoder2 section 2.1, as DataTrove LambdaFilters (bigcode preprocessing's line statistics)."""
    import numpy as np
    from datatrove.pipeline.filters import LambdaFilter

    def long_lines(doc):
        lengths = [len(line) for line in doc.text.splitlines()] or [0]
        if len(lengths) > 100_000:
            return False
        if doc.metadata["lang"] in _EXEMPT:
            return max(lengths) <= 100_000
        return np.mean(lengths) <= 100 and max(lengths) <= 1000

    def autogenerated(doc):
        head = "\n".join(doc.text.splitlines()[:5]).lower()
        return not any(p in head for p in _PHRASES)

    def alpha(doc):
        test = str.isalnum if doc.metadata["lang"] in ("assembly", "webassembly") else str.isalpha
        return np.mean([test(c) for c in doc.text]) >= 0.25

    def encoded(doc):
        matches = [m for p in (_B64, _HEX, _UNI) for m in p.findall(doc.text)]
        return not any(len(m) > 1024 for m in matches) and sum(map(len, matches)) <= 0.5 * len(doc.text)

    def language_specific(doc):
        text, lang, path = doc.text, doc.metadata["lang"], doc.metadata["path"].lower()
        data = ("text", "json", "yaml", "web ontology language", "graphviz (dot)")
        if lang in data and len(text.splitlines()) > 512:
            return False
        if lang in ("json", "yaml") and not 50 <= len(text) <= 5000:
            return False
        if lang != "xslt" and "<?xml version=" in text[:100]:
            return False
        if lang == "text":
            stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            return "requirement" in stem or stem in ("readme", "notes", "todo", "description", "cmakelists")
        return True

    def as_bool(fn):  # DataTrove keeps a document only on `True` itself, not on numpy's True
        return lambda doc: bool(fn(doc))

    rules = [long_lines, autogenerated, alpha, encoded, language_specific]
    return [(fn.__name__, LambdaFilter(as_bool(fn))) for fn in rules]


class DataTroveChains:
    """DataTrove's filters for one profile and language, built on first use."""

    def __init__(self, config):
        self.config = config
        self.cache: dict = {}

    def get(self, profile: str, lang: str):
        key = (profile, lang)
        if key not in self.cache:
            self.cache[key] = self._build(profile, lang)
        return self.cache[key]

    def _build(self, profile, lang):
        from datatrove.pipeline.filters import (
            C4QualityFilter,
            FineWebQualityFilter,
            GopherQualityFilter,
            GopherRepetitionFilter,
        )

        c, dt_lang = self.config, {"zh": "cmn_Hani"}.get(lang, lang)
        if profile == "code":
            return starcoder2_filters()
        if profile == "zh_web":
            f = FW2_CMN
            return [
                (
                    "gopher_repetition",
                    GopherRepetitionFilter(
                        language="cmn_Hani",
                        dup_para_frac=0,
                        dup_line_char_frac=0,
                        dup_para_char_frac=0,
                        dup_line_frac=f["dup_line_frac"],
                        top_n_grams=f["top_n_grams"],
                        dup_n_grams=f["dup_n_grams"],
                    ),
                ),
                (
                    "fineweb",
                    FineWebQualityFilter(
                        language="cmn_Hani",
                        short_line_thr=999,
                        char_duplicates_ratio=0.1,
                        line_punct_thr=f["line_punct_thr"],
                        new_line_ratio=f["new_line_ratio"],
                    ),
                ),
                (
                    "gopher_quality",
                    GopherQualityFilter(
                        language="cmn_Hani",
                        max_avg_word_length=f["max_avg_word_length"],
                        min_avg_word_length=f["min_avg_word_length"],
                        stop_words=f["stopwords"],
                        max_non_alpha_words_ratio=f["max_non_alpha_words_ratio"],
                        min_stop_words=2,
                    ),
                ),
            ]
        if profile == "books":
            b = c.profiles.books
            gq = b.gopher_quality
            return [
                ("gopher_repetition", GopherRepetitionFilter(language=dt_lang, **_rep_args(b.gopher_repetition))),
                ("gopher_quality", GopherQualityFilter(language=dt_lang, **_quality_args(gq, lang))),
            ]
        return [  # en_web
            ("gopher_repetition", GopherRepetitionFilter(language=dt_lang, **_rep_args(c.gopher_repetition))),
            ("gopher_quality", GopherQualityFilter(language=dt_lang, **_quality_args(c.gopher_quality, lang))),
            ("c4", C4QualityFilter(filter_no_terminal_punct=False, language=dt_lang)),
            (
                "fineweb",
                FineWebQualityFilter(
                    language=dt_lang,
                    short_line_length=c.fineweb.short_line_length_by_lang.get(lang, c.fineweb.short_line_length),
                ),
            ),
        ]


def _rep_args(r):
    return {
        "dup_line_frac": r.dup_line_frac,
        "dup_para_frac": r.dup_para_frac,
        "dup_line_char_frac": r.dup_line_char_frac,
        "dup_para_char_frac": r.dup_para_char_frac,
        "top_n_grams": [list(x) for x in r.top_n_grams],
        "dup_n_grams": [list(x) for x in r.dup_n_grams],
    }


def _quality_args(q, lang):
    over = q.lang_overrides.get(lang, {})
    names = ("min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length")
    names += ("max_symbol_word_ratio", "max_bullet_lines_ratio", "max_ellipsis_lines_ratio")
    names += ("max_non_alpha_words_ratio", "min_stop_words")
    args = {n: over.get(n, getattr(q, n)) for n in names}
    stop = q.stop_words.get(lang)
    if stop is None:
        args["min_stop_words"] = None  # ours skips the rule for a language without a list
    return {**args, "stop_words": list(stop or ())}


def agreement(docs, config):
    from datatrove.data import Document as DTDoc

    from pipeline_project.cleaning.chain.profiles import ProfileRouter, build_chain, run_chain, split_at_dedup
    from pipeline_project.cleaning.steps import RunContext

    router, dt = ProfileRouter(config), DataTroveChains(config)
    groups = defaultdict(list)
    for i, doc in enumerate(copy.deepcopy(docs)):
        groups[router.select(doc)].append((i, doc))
    out = {}
    for profile, items in groups.items():
        filters = split_at_dedup(build_chain(config, profile))[0]
        cut = max(i for i, s in enumerate(filters) if s.name in ("non_empty", "language_id")) + 1
        ready = run_chain(filters[:cut], items, RunContext("bench"), profile, [], [])
        same, classes, examples, start = 0, Counter(), {}, time.process_time()
        by_lang: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        ours_s = theirs_s = 0.0
        for _, doc in ready:
            text, lang = doc.text, doc.meta.get("lang", "en")
            fields = doc.meta.get("fields") or {}
            t0 = time.process_time()
            mine = next((f"{s.name}:{r}" for s in filters[cut:] if (r := s.check(doc)) is not None), None)
            t1 = time.process_time()
            theirs = None
            dt_doc = DTDoc(text=text, id=doc.id, metadata={"lang": lang, "path": fields.get("path", doc.source)})
            for name, f in dt.get(profile, lang):
                try:
                    res = f.filter(dt_doc)
                except Exception as exc:  # noqa: BLE001 - count DataTrove's crashes as their own class
                    res = (False, f"exception:{type(exc).__name__}")
                if res is not True:
                    theirs = f"{name}:{res[1]}" if isinstance(res, tuple) else name
                    break
            t2 = time.process_time()
            ours_s, theirs_s = ours_s + t1 - t0, theirs_s + t2 - t1
            by_lang[lang][0] += 1
            if (mine is None) == (theirs is None):
                same += 1
                by_lang[lang][1] += 1
            else:
                key = f"ours={mine or 'keep'} / datatrove={theirs or 'keep'}"
                classes[key] += 1
                examples.setdefault(key, doc.id)
        n = len(ready)
        out[profile] = {
            "docs": n,
            "agree": same,
            "agreement": round(same / n, 4) if n else 1.0,
            "disagreements": dict(classes.most_common()),
            "example_ids": examples,
            "by_lang": {k: {"docs": n, "agreement": round(a / n, 4)} for k, (n, a) in sorted(by_lang.items())},
            "ours_cpu_s": round(ours_s, 2),
            "datatrove_cpu_s": round(theirs_s, 2),
        }
        took = time.process_time() - start
        print(f"agreement {profile}: {out[profile]['agreement']} of {n} ({took:.0f}s)", file=sys.stderr)
    return out


# --------------------------------------------------------------------------- 3. cost of profile selection
def selection_cost(docs, config, off, reps: int):
    """Best-of-`reps` CPU seconds: (a) English web pages routed vs the chain of before (identical decisions);
    (b) every document routed vs each profile's chain run directly on its documents, the grouping known."""
    from pipeline_project.cleaning import Document
    from pipeline_project.cleaning.chain.chain import CleaningPipeline
    from pipeline_project.cleaning.chain.profiles import ProfileRouter, run_chain
    from pipeline_project.cleaning.steps import RunContext

    router = ProfileRouter(config)
    grouped = copy.deepcopy(docs)
    names = [router.select(d) for d in grouped]
    web = [d for d, name in zip(docs, names) if name == "en_web" and folder_of(d) == "web_noisy"]
    routed_p, off_p = CleaningPipeline(config), CleaningPipeline(off)

    def clean(pipeline, docs, batch_id):  # one chunk, no index
        return pipeline.finish(pipeline.start(docs, batch_id))

    def timed(fn) -> float:
        start = time.process_time()
        fn()
        return time.process_time() - start

    def direct():
        ctx = RunContext("bench")
        for name, steps in routed_p.chains.items():
            items = []
            for i, (doc, routed) in enumerate(zip(docs, names)):
                if routed == name:  # the document as read, plus what the hints gave (a code file's language)
                    meta = {**copy.deepcopy(doc.meta), **({"lang": grouped[i].meta["lang"]} if name == "code" else {})}
                    items.append((i, Document(doc.id, doc.text, doc.source, meta)))
            if items:
                run_chain(steps, items, ctx, name, [], [])

    results = {"web_routed": [], "web_before": [], "all_routed": [], "all_direct": []}
    for _ in range(reps):
        a, b = copy.deepcopy(web), copy.deepcopy(web)
        results["web_routed"].append(timed(lambda a=a: clean(routed_p, a, "w")))
        results["web_before"].append(timed(lambda b=b: clean(off_p, b, "w")))
        c = copy.deepcopy(docs)
        results["all_routed"].append(timed(lambda c=c: clean(routed_p, c, "a")))
        results["all_direct"].append(timed(direct))
    check_a = clean(routed_p, copy.deepcopy(web), "w")
    check_b = clean(off_p, copy.deepcopy(web), "w")
    assert [d.id for d in check_a.kept] == [d.id for d in check_b.kept], "en web decisions changed"
    best = {k: min(v) for k, v in results.items()}
    select = next(s for s in check_a.step_stats if s.name == "profile_select")
    return {
        "web_docs": len(web),
        "all_docs": len(docs),
        "reps": reps,
        "cpu_s": {k: round(v, 3) for k, v in best.items()},
        "web_overhead": round(best["web_routed"] / best["web_before"] - 1, 4),
        "all_overhead": round(best["all_routed"] / best["all_direct"] - 1, 4),
        "web_profile_select_s": round(select.seconds, 4),
    }


# --------------------------------------------------------------------------- report
def decontam_lines(gone) -> list[str]:
    if gone is None:  # decontamination off
        return []
    per = ", ".join(f"{k} {v}" for k, v in gone["by_profile"].items()) or "none"
    lines = ["", f"Dropped by decontamination (HumanEval): {len(gone['docs'])} documents ({per})"]
    return lines + [f"- {d['id']} ({d['domain']}): {d['reason']}" for d in gone["docs"][:20]]


def markdown(res) -> str:
    lines = ["### Keep rate per corpus folder (one batch; before = the chain before profiles)", ""]
    lines += ["| folder | docs | routed to | kept | keep % | before: kept | before % | top removal reasons |"]
    lines += ["|---|---:|---|---:|---:|---:|---:|---|"]
    for f in FOLDERS:
        a = res["profiles_on"]["folders"][f]
        b = res.get("profiles_off", {}).get("folders", {}).get(f, {"kept": "-", "keep_rate": float("nan")})
        routed = ", ".join(f"{k} {v}" for k, v in a["routed"].items())
        reasons = "; ".join(f"{k} {v}" for k, v in list(a["top_reasons"].items())[:4])
        lines.append(
            f"| {f} | {a['docs']} | {routed} | {a['kept']} | {100 * a['keep_rate']:.1f} | {b['kept']} | "
            f"{100 * b['keep_rate']:.1f} | {reasons} |"
        )
    lines += ["", "### Per profile: keep rate, agreement with DataTrove 0.10.1", ""]
    lines += ["| profile | in | kept | keep % | compared | agreement | disagreement classes (count) |"]
    lines += ["|---|---:|---:|---:|---:|---:|---|"]
    for name, p in res["profiles_on"]["profiles"].items():
        ag = res.get("agreement", {}).get(name)
        classes = "; ".join(f"{k}: {v}" for k, v in list((ag or {}).get("disagreements", {}).items())[:4]) or "-"
        agree = f"{100 * ag['agreement']:.2f}%" if ag else "n/a"
        lines.append(
            f"| {name} | {p['in']} | {p['kept']} | {100 * p['keep_rate']:.1f} | {ag['docs'] if ag else '-'} | "
            f"{agree} | {classes} |"
        )
    en = res.get("agreement", {}).get("en_web", {}).get("by_lang")
    if en:
        lines += [
            "",
            "en_web agreement by language: "
            + ", ".join(f"{k} {100 * v['agreement']:.1f}% of {v['docs']}" for k, v in en.items()),
        ]
    long = res["profiles_on"]["profiles"].get("zh_web", {}).get("min_words")
    if long:
        lines += [
            "",
            f"zh_web documents of at least {long['min_words']} words (jieba): {long['docs']}, kept {long['kept']} "
            f"({100 * long['keep_rate']:.1f}%)",
        ]
    on = res["profiles_on"]
    if "profile_select_s" in on:
        lines += [
            "",
            f"profile_select in the one-batch run: {on['profile_select_s']} s of {on['chain_s'] + on['profile_select_s']:.1f} s "
            "(wall; it includes the fastText call zh_web's language_id step then takes instead of making it again)",
        ]
    lines += decontam_lines(on.get("decontaminated"))
    lines += ["", "### Removal reasons per profile", ""]
    for name, p in res["profiles_on"]["profiles"].items():
        top = ", ".join(f"{k} {v}" for k, v in sorted(p["reasons"].items(), key=lambda kv: -kv[1])[:8])
        lines.append(f"- **{name}**: {top or '-'}")
    cost = res.get("selection_cost")
    if cost:
        c = cost["cpu_s"]
        lines += ["", f"### Cost of profile selection (CPU s, best of {cost['reps']})", ""]
        lines += ["| workload | docs | routed | without routing | overhead |", "|---|---:|---:|---:|---:|"]
        lines.append(
            f"| English web (web_noisy, en_web) vs chain of before | {cost['web_docs']} | {c['web_routed']} | "
            f"{c['web_before']} | {100 * cost['web_overhead']:+.1f}% |"
        )
        lines.append(
            f"| all folders vs each profile's chain run directly | {cost['all_docs']} | {c['all_routed']} | "
            f"{c['all_direct']} | {100 * cost['all_overhead']:+.1f}% |"
        )
    return "\n".join(lines)


def main():
    from pipeline_project.cleaning import CleaningConfig
    from pipeline_project.cleaning.config.profiles import ProfilesConfig
    from pipeline_project.cleaning.decontam.index import DecontaminationConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="at most 1500 documents per file")
    ap.add_argument("--per-file", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cost-per-file", type=int, default=300, help="documents per file for the cost runs")
    ap.add_argument("--skip", nargs="*", default=[], choices=["agreement", "cost", "before"])
    ap.add_argument("--decontaminate", action="store_true", help="decontamination on (HumanEval), own JSON")
    args = ap.parse_args()
    per_file = args.per_file or (1500 if args.quick else None)
    decontam = DecontaminationConfig(enabled=args.decontaminate)
    config = CleaningConfig(decontamination=decontam)
    off = CleaningConfig(profiles=ProfilesConfig(enabled=False), decontamination=decontam)
    z = config.profiles.zh_web
    assert z.gopher_quality.stop_words["zh"] == tuple(FW2_CMN["stopwords"]), "zh_web stop words drifted"
    assert z.language_min_score == FW2_CMN["language_score"], "zh_web language score drifted"
    load_start = os.getloadavg()[0]
    docs = load(per_file)
    print(f"{len(docs)} documents", file=sys.stderr)
    res = {"per_file": per_file, "config_version": config.version, "docs": len(docs)}
    res["profiles_on"], _ = keep_rates(docs, config)
    if "before" not in args.skip:
        res["profiles_off"], _ = keep_rates(docs, off)
    if "agreement" not in args.skip:
        res["agreement"] = agreement(docs, config)
    if "cost" not in args.skip:
        res["selection_cost"] = selection_cost(load(args.cost_per_file), config, off, args.reps)
    res["decontamination"], res["host"] = args.decontaminate, host(load_start)
    out = RESULTS_DECONTAM if args.decontaminate else RESULTS
    out.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(docs)} documents, {load_line(res)}; wrote {out.relative_to(ROOT)}\n")
    print(markdown(res))


if __name__ == "__main__":
    main()
