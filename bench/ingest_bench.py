"""The ingest graph (S3 -> cleaned shards -> token blocks) on the local stack: throughput, scaling, dedup cost
per batch over consecutive batches, and peak memory by batch size.

    .venv/bin/pipeline-project stack up
    .venv/bin/python bench/ingest_bench.py --mb 200 --batches 10 --rss-mb 25 50 100

Raw text is built from ../shared/corpus (its JSONL and text files, books cut into chapters) with exact
copies and word-edited near-duplicates mixed in; in the curve, `--fresh` (0.5) of each batch is new documents
recombined from corpus paragraphs, so the index grows by thousands of documents a batch. It is uploaded to S3
under `bench-<stamp>/raw/<batch>/`. Each batch is materialized with the project's real resources (s3proxy,
PostgreSQL dedup index, 3 Kafka brokers) through `dg.materialize`, in a subprocess per measurement so its
peak RSS is its own. Three parts: `curve` (consecutive batches), `rss` (peak memory by batch size) and
`scaling` (1 process vs 2 workers); `--only PART` runs one. Each part prints its rows with the load average
and replaces its own keys in bench/results/ingest.json.

Measured per run: wall seconds per asset (from the run's step events), documents and MB in, the dedup
index's own lookup + commit seconds and the rows and bytes it read back (cleaned_shards' `dedup_index`
metadata), the index's size after the batch, the subprocess's own peak RSS (VmHWM of /proc/self/status:
ru_maxrss would report this bench's size when it spawned the subprocess, which Linux carries across exec, and
this bench held the whole upload) and the largest RSS any of its filter workers reached (sampled every 0.2 s
with psutil, for the same reason).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from statistics import median

from pipeline_project.defs.resources.layout import TopicConfig

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RESULTS = ROOT / "bench" / "results" / "ingest.json"


def corpus_docs() -> list[str]:
    """Texts of the shared corpus: JSONL `text` fields and .txt files (books cut at blank lines into ~8 KB)."""
    texts = []
    for path in sorted(CORPUS.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".jsonl":
            for line in path.read_text(errors="replace").splitlines():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("text"), str) and obj["text"].strip():
                    texts.append(obj["text"])
        elif path.suffix == ".txt":
            chunk: list[str] = []
            for para in path.read_text(errors="replace").split("\n\n"):
                chunk.append(para)
                if sum(len(c) for c in chunk) > 8000:
                    texts.append("\n\n".join(chunk))
                    chunk = []
    return texts


def _fresh_text(texts: list[str], rng: random.Random, parts: int = 4) -> str:
    """A document no earlier batch holds: paragraphs of `parts` random corpus texts, one slice from each
    (shingle Jaccard with any one source is about 1 / `parts`, far below the near-duplicate threshold)."""
    out = []
    for _ in range(parts):
        paras = [p for p in rng.choice(texts).split("\n\n") if p.strip()] or [""]
        start = rng.randrange(len(paras))
        out.extend(paras[start : start + max(1, len(paras) // parts)])
    return "\n\n".join(out)


def make_batch(texts: list[str], mb: float, rng: random.Random, fresh: float = 0.0) -> bytes:
    """JSONL of about `mb` MB: corpus texts, 10 % exact copies, 10 % near-duplicates (2 % of words replaced),
    and with `fresh` > 0 that share of new documents (`_fresh_text`), so the dedup index grows every batch."""
    out, size, kept = [], 0, []
    while size < mb * 1e6:
        r = rng.random()
        if r < fresh:
            text = _fresh_text(texts, rng)
        elif kept and (r := (r - fresh) / (1 - fresh)) < 0.1:
            text = rng.choice(kept)
        elif kept and r < 0.2 and (words := rng.choice(kept).split()):
            for _ in range(max(1, len(words) // 50)):
                words[rng.randrange(len(words))] = f"w{rng.randrange(10**6)}"
            text = " ".join(words)
        else:
            text = rng.choice(texts)
            kept.append(text)
        line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
        out.append(line)
        size += len(line.encode())
    return "".join(out).encode()


def _own_peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return round(kb / 1024, 1)


def _sample_children_rss() -> list[float]:
    """A list that a daemon thread keeps holding the largest RSS (MB) seen of any process below this one."""
    import psutil

    peak: list[float] = []

    def sample() -> None:
        me = psutil.Process()
        while True:
            for child in me.children(recursive=True):
                try:
                    rss = child.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                if not peak or rss > peak[0]:
                    peak[:] = [rss]
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    return peak


def run_one(args: argparse.Namespace) -> dict:
    """One batch through the ingest graph, in this process (the parent reads our peak RSS)."""
    import dagster as dg

    from pipeline_project.defs.assets import cleaned, raw, token_blocks
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.dedup import DedupIndexResource
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.ingest.manifest import BatchManifest, RawObject, make_batch_id, write_manifest_once
    from pipeline_project.stack import Stack

    settings = Stack().settings()
    client = settings.s3_client()
    key = args.key
    head = client.head_object(Bucket=settings.bucket, Key=key)
    obj = RawObject(key=key, etag=head["ETag"].strip('"'), size=int(head["ContentLength"]),
                    last_modified=head["LastModified"].isoformat())  # fmt: skip
    batch_id = make_batch_id([obj])
    write_manifest_once(client, BatchManifest(batch_id=batch_id, bucket=settings.bucket, objects=(obj,)))
    res = build_resources(settings)
    res["layout"] = PipelineLayout(
        bucket=settings.bucket,
        raw_prefix=f"{args.prefix}raw/",
        shards_prefix=f"{args.prefix}shards/",
        exclusions_prefix=f"{args.prefix}exclusions/",
        topic=TopicConfig(name=args.topic),
    )
    res["dedup"] = DedupIndexResource(postgres_url=settings.postgres_url, schema_name=args.schema)
    # workers -1: the whole chain in this process (no pool), the one-process baseline of the scaling run
    res["cleaning"] = CleaningResource(workers=max(args.workers, 0), pool_min_mb=1e9 if args.workers < 0 else 4.0)
    workers_peak = _sample_children_rss()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(batches.name, [batch_id])
        assets = [raw.raw_text, cleaned.cleaned_shards, token_blocks.token_blocks]
        started = time.perf_counter()
        result = dg.materialize(assets, resources=res, partition_key=batch_id, instance=instance)
        wall = time.perf_counter() - started
        assert result.success
        steps = {}
        for event in result.all_events:
            if event.event_type_value == "STEP_SUCCESS":
                steps[event.step_key] = event.event_specific_data.duration_ms / 1000
        meta = {
            e.materialization.asset_key.to_user_string(): {
                k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()
            }
            for e in result.get_asset_materialization_events()
        }
    c = meta["cleaned_shards"]
    traffic = c.get("dedup_index") or {}
    from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex

    history = PostgresDedupIndex(settings.postgres_url, schema=args.schema)
    index_docs = len(history)  # documents in the index after this batch
    history.close()
    return {
        "batch_id": batch_id,
        "mb_in": obj.size / 1e6,
        "documents_in": c["documents_in"],
        "kept": c["kept"],
        "tokens": meta["token_blocks"]["tokens"],
        "wall_s": round(wall, 2),
        "steps_s": steps,
        # the dedup index's own cost in this batch: lookup + commit seconds, rows and bytes read back
        "dedup_s": round(traffic.get("lookup_s", 0.0) + traffic.get("commit_s", 0.0), 3),
        "dedup_index": traffic,
        "index_docs_after": index_docs,
        "chunks": c.get("chunks"),
        "workers": args.workers,
        # this process (reading S3, dedup, shard writing, tokenizing) and, separately, its filter workers
        "peak_rss_mb": _own_peak_rss_mb(),
        # CPU seconds of this process (not its filter workers): the serial part that more workers cannot shrink
        "main_cpu_s": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 1),
        # the filter workers' CPU seconds (the pool has been shut down and waited for, so its workers count)
        "workers_cpu_s": round(sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2]), 1),
        "workers_peak_rss_mb": round(max(workers_peak, default=0.0), 1),
    }


def child(key: str, prefix: str, topic: str, schema: str, workers: int, cpus: int = 0) -> dict:
    cmd = [sys.executable, __file__, "--one", "--key", key, "--prefix", prefix, "--topic", topic,
           "--schema", schema, "--workers", str(workers), "--cpus", str(cpus)]  # fmt: skip
    import psutil

    before = psutil.cpu_times()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    after = psutil.cpu_times()
    if out.returncode != 0:
        raise SystemExit(f"bench child failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # core-seconds nobody used while the child ran (its imports before the clock starts included): what more
    # parallelism could still have taken; the rest of the machine's busy time is the stack's servers and the OS
    r["machine_idle_core_s"] = round((after.idle + after.iowait) - (before.idle + before.iowait), 1)
    r["machine_busy_core_s"] = round(
        sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "nice", "irq", "softirq")), 1
    )
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1000, help="raw MB in total over the consecutive batches")
    parser.add_argument("--batches", type=int, default=50, help="consecutive batches for the dedup-cost curve")
    parser.add_argument("--rss-mb", type=float, nargs="*", default=[50, 200, 800], help="batch sizes for peak RSS")
    parser.add_argument("--scaling-mb", type=float, default=20, help="batch size for the 1 vs 2 worker run")
    parser.add_argument("--fresh", type=float, default=0.5, help="share of new documents in each curve batch")
    parser.add_argument("--only", choices=["curve", "rss", "scaling"], help="run only that part")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--cpus", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        if args.cpus:  # this process, its pool and the tokenizer's threads on the first `cpus` cores only
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cpus])
        print(json.dumps(run_one(args)))
        return

    from pipeline_project.stack import Stack

    settings = Stack().settings()
    client = settings.s3_client()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    prefix, topic = f"bench-{stamp}/", f"bench-{stamp}-blocks"
    texts = corpus_docs()
    rng = random.Random(0)

    def upload(name: str, mb: float, body: bytes | None = None, fresh: float = 0.0) -> str:
        key = f"{prefix}raw/{name}.jsonl"
        # multipart, as `aws s3 cp` does: s3proxy (256 MB heap) answers one PutObject of ~100 MB+ with 500 (OOM)
        client.upload_fileobj(io.BytesIO(body or make_batch(texts, mb, rng, fresh)), settings.bucket, key)
        return key

    load = os.getloadavg()
    results: dict = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["corpus_texts"] = len(texts)
    parts = [args.only] if args.only else ["curve", "rss", "scaling"]
    for part in parts:
        results[f"{part}_load_average_start"] = os.getloadavg()
        if part == "curve":
            per_batch = args.mb / args.batches
            curve = []
            for i in range(args.batches):
                r = child(upload(f"b{i:03d}", per_batch, fresh=args.fresh), prefix, topic, f"bench_{stamp}_curve", 2)
                r["load_1m"] = round(os.getloadavg()[0], 2)
                curve.append(r)
                d = r["dedup_index"]
                print(f"batch {i}: {r['mb_in']:.1f} MB, {r['wall_s']} s, cleaned_shards "
                      f"{r['steps_s']['cleaned_shards']:.1f} s, dedup {r['dedup_s']:.2f} s, "
                      f"{d.get('bytes_read', 0) / 1e3:.0f} kB read, kept {r['kept']}, "
                      f"index {r['index_docs_after']} docs, load {r['load_1m']:.2f}", flush=True)  # fmt: skip
            k = max(1, min(10, len(curve) // 2))

            def last_over_first(value, curve=curve, k=k) -> float | None:
                first, last = median(map(value, curve[:k])), median(map(value, curve[-k:]))
                return round(last / first, 2) if first else None

            total_mb = sum(r["mb_in"] for r in curve)
            total_s = sum(r["wall_s"] for r in curve)
            results.update(
                consecutive=curve,
                consecutive_mb_total=round(total_mb, 1),
                consecutive_fresh_share=args.fresh,
                index_docs_first_last=[curve[0]["index_docs_after"], curve[-1]["index_docs_after"]],
                cleaning_last_over_first=last_over_first(lambda r: r["steps_s"].get("cleaned_shards", 0)),
                dedup_last_over_first=last_over_first(lambda r: r["dedup_s"]),
                # per MB of input, so a batch that happens to hold more duplicates does not read as growth
                dedup_bytes_read_last_over_first=last_over_first(
                    lambda r: r["dedup_index"].get("bytes_read", 0) / r["mb_in"]
                ),
                end_to_end_mb_per_s_2_workers=round(total_mb / total_s, 3),
            )
            print(f"| {len(curve)} batches, {total_mb:.0f} MB | {total_mb / total_s:.3f} MB/s | index "
                  f"{results['index_docs_first_last'][0]} -> {results['index_docs_first_last'][1]} docs | "
                  f"last {k} / first {k} (medians): cleaned_shards {results['cleaning_last_over_first']}, "
                  f"dedup seconds {results['dedup_last_over_first']}, dedup bytes read per MB "
                  f"{results['dedup_bytes_read_last_over_first']} |")  # fmt: skip
        elif part == "rss":
            by_size = {round(r["mb_in"]): r for r in results.get("rss", [])}
            for i, mb in enumerate(args.rss_mb):
                r = child(upload(f"rss-{mb:g}", mb), prefix, topic, f"bench_{stamp}_rss{i}", 2)
                by_size[round(r["mb_in"])] = r
                print(f"| peak RSS, {r['mb_in']:.0f} MB batch | {r['wall_s']} s | main {r['peak_rss_mb']} MB | "
                      f"each filter worker {r['workers_peak_rss_mb']} MB |", flush=True)  # fmt: skip
            results["rss"] = [by_size[k] for k in sorted(by_size)]
        else:
            # the same bytes four times: in one process (no pool) held to one core, then unpinned, then 1 and 2
            # filter workers beside it. The stack's servers are never pinned: they run on both cores in every run
            body = make_batch(texts, args.scaling_mb, rng)
            scaling = {}
            runs = [("in-process-1-core", -1, 1), ("in-process", -1, 0), ("workers-1", 1, 0), ("workers-2", 2, 0)]
            for i, (name, workers, cpus) in enumerate(runs):
                key = upload(f"scaling-{name}", 0, body)
                scaling[name] = r = child(key, prefix, topic, f"bench_{stamp}_s{i}", workers, cpus)
                print(f"| {name} | {r['wall_s']} s | cleaned_shards {r['steps_s']['cleaned_shards']:.1f} s | "
                      f"token_blocks {r['steps_s']['token_blocks']:.1f} s | load {os.getloadavg()[0]:.2f} |", flush=True)  # fmt: skip

            def ratio(base: str, step: str | None = None, scaling: dict = scaling) -> float:
                a, b = scaling[base], scaling["workers-2"]
                return round(a["steps_s"][step] / b["steps_s"][step] if step else a["wall_s"] / b["wall_s"], 2)

            results["scaling"] = scaling
            results["scaling_mb"] = args.scaling_mb
            # 1 core -> 2 cores, the measure; then one unpinned process (its tokenizer threads already
            # use both cores) -> 2 filter workers
            results["scaling_factor"] = ratio("in-process-1-core")
            results["scaling_factor_cleaned_shards"] = ratio("in-process-1-core", "cleaned_shards")
            results["scaling_factor_unpinned"] = ratio("in-process")
            results["scaling_factor_unpinned_cleaned_shards"] = ratio("in-process", "cleaned_shards")
            # every run's factors are kept: on a shared 2-core machine one run is not a measurement
            results.setdefault("scaling_runs", []).append(
                {
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "mb": args.scaling_mb,
                    "load_average": [round(results["scaling_load_average_start"][0], 2), round(os.getloadavg()[0], 2)],
                    "wall_s": {name: r["wall_s"] for name, r in scaling.items()},
                    **{k: results[k] for k in results if k.startswith("scaling_factor")},
                }
            )
            print(f"scaling 1 core -> 2: {results['scaling_factor']}x end to end, "
                  f"{results['scaling_factor_cleaned_shards']}x cleaned_shards; one unpinned process -> 2 workers: "
                  f"{results['scaling_factor_unpinned']}x, {results['scaling_factor_unpinned_cleaned_shards']}x")  # fmt: skip
        results[f"{part}_load_average_end"] = os.getloadavg()
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1))
    print(f"load average {load[0]:.2f} -> {os.getloadavg()[0]:.2f}; wrote {RESULTS}")


if __name__ == "__main__":
    main()
