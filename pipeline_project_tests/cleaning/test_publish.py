"""The exclusion sink and the shards' meta keep no PII that the shards mask in the text."""

import contextlib
import io
import json
import re
import uuid

import pytest
import zstandard

from pipeline_project.cleaning import CleaningConfig, Quarantined, read_object
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output.publish import EXCLUSIONS_NAME, read_shard_manifest
from pipeline_project.cleaning.output.shards import read_shard
from pipeline_project_harness.standins import WholeBatchPipeline, exclusion_records, publish_batch
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

from .conftest import prose

EMAIL, IP, PHONE = "jane.doe@example.com", "8.8.4.4", "+1 (415) 555-0132"
PII = re.compile(r"[\w.+-]+@example\.com|8\.8\.4\.\d|555-01\d\d")


def _line(text: str, **fields) -> bytes:
    return json.dumps({"text": text, **fields}).encode() + b"\n"


def _batch(config: CleaningConfig):
    contact = f" Write to {EMAIL} or call {PHONE}; the server is {IP}."
    data = b"".join(
        [
            _line(prose(12, seed=1) + contact, author=EMAIL, source_ip=IP),  # kept, masked
            _line("too short" + contact),  # dropped by an early filter, before the PII step
            # 8 hits: dropped for too_many_pii, so the step never masked it
            _line(prose(12, seed=2) + "".join(f" Ask clerk{i}@example.com at 8.8.4.{i}." for i in range(4))),
            _line(prose(12, seed=1) + contact, author=EMAIL),  # an exact duplicate of the first
        ]
    )
    items = list(read_object("raw/pii.jsonl", data, config))
    items.append(Quarantined("raw/x.jsonl#1", "raw/x.jsonl", "bad_json_line", f"Expecting value near {EMAIL}"))
    return WholeBatchPipeline(config).run(items, "b-pii", MemoryDedupIndex())


def test_exclusion_records_mask_pii_in_dropped_text_and_quarantine_details():
    config = CleaningConfig()
    result = _batch(config)
    assert {d.reason.split(":")[0] for d in result.dropped} >= {"too_many_pii"}
    assert any(PII.search(d.text) for d in result.dropped), "the test needs dropped documents that hold PII"
    records = exclusion_records(result, config)
    assert len(records) == len(result.dropped) + len(result.quarantined) == 4
    for rec in records:
        assert not PII.search(json.dumps(rec)), rec
    assert any(config.pii.email_mask in rec.get("text", "") for rec in records)
    assert [r["detail"] for r in records if r["kind"] == "quarantined"] == [
        f"Expecting value near {config.pii.email_mask}"
    ]


def test_published_batch_keeps_no_pii_in_shards_meta_or_exclusions():
    config = CleaningConfig()
    result = _batch(config)
    client = MemoryS3Client({})
    publish_batch(
        client,
        "bucket",
        batch_id="b-pii",
        shard_dir="shards/b-pii/",
        exclusions_dir="exclusions/b-pii/",
        result=result,
        config=config,
        input_keys=["raw/pii.jsonl"],
    )
    manifest = read_shard_manifest(client, "bucket", "shards/b-pii/")
    shards = [rec for s in manifest.shards for rec in read_shard(client.get_object("bucket", s.key)["Body"].read())]
    assert len(shards) == 1 and shards[0]["meta"]["fields"]["author"] == config.pii.email_mask
    excluded = client.get_object("bucket", f"exclusions/b-pii/{EXCLUSIONS_NAME}")["Body"].read()
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(excluded)) as reader:
        sink = reader.read().decode()
    for text in [json.dumps(r, ensure_ascii=False) for r in shards] + [sink]:
        assert not PII.search(text), text[:300]


def test_with_the_pii_step_off_the_sink_keeps_the_text_as_the_shards_do():
    config = CleaningConfig(pii=CleaningConfig().pii.model_copy(update={"enabled": False}))
    result = _batch(config)
    assert any(PII.search(r.get("text", "")) for r in exclusion_records(result, config))


def test_the_streaming_cleaner_sink_is_masked_through_exclusion_recorder():
    from pipeline_project.cleaning.output.publish import exclusion_recorder
    from pipeline_project.cleaning.output.writer import BatchWriter
    from pipeline_project.cleaning.stream import StreamingCleaner

    config = CleaningConfig()
    contact = f" Write to {EMAIL} or call {PHONE}; the server is {IP}."
    data = _line("too short" + contact) + _line(prose(12, seed=3) + contact)
    client = MemoryS3Client({})
    writer = BatchWriter(client, "bucket", "shards/s/attempt/", "exclusions/s/excluded.jsonl.zst")
    cleaner = StreamingCleaner(config, chunk_docs=1)
    out = cleaner.run(
        read_object("raw/pii.jsonl", data, config), "s", MemoryDedupIndex(), writer, exclusion_recorder(config)
    )
    writer.finish_shards()
    writer.upload_exclusions()
    assert out.counts["dropped"] == 1
    excluded = client.get_object("bucket", "exclusions/s/excluded.jsonl.zst")["Body"].read()
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(excluded)) as reader:
        sink = reader.read().decode()
    assert config.pii.email_mask in sink and not PII.search(sink)


SECRET_CODE = (
    '"""Settings of the billing client."""\n\nimport os\n\n'
    'AWS_KEY = "AKIAIOSFODNN7EXAMPLE"\ndb_password = "x9$Kq2!vLp0#Zr7"\n'
    "# maintainer: Jane Roe <jane.roe@example.org>\n\n\n"
    "def endpoint(region):\n    return os.environ.get('BILLING_URL', 'https://billing.' + region + '.example.net')\n"
)
SECRETS = ("AKIAIOSFODNN7EXAMPLE", "x9$Kq2!vLp0#Zr7", "jane.roe@example.org")


@pytest.mark.stack
@pytest.mark.parametrize("workers", [1, 2])
def test_dropped_code_files_reach_the_s3_exclusion_sink_masked_as_the_shards_are(stack, workers):
    """A code file dropped as a duplicate (after the masking step's work was done ahead in a pool worker) and one
    dropped by an early filter: their secrets are masked in the sink object in S3 by the code profile's masking."""
    from pipeline_project.cleaning.chain.pool import FilterPool

    config = CleaningConfig()
    generated = "# This file is auto-generated. Do not edit.\n" + SECRET_CODE
    data = b"".join(_line(text, path=path) for path, text in
                    [("billing/settings.py", SECRET_CODE), ("copy/settings.py", SECRET_CODE), ("gen/api.py", generated)])  # fmt: skip
    items = list(read_object("raw/code/billing.jsonl", data, config))
    with FilterPool(config, workers) if workers > 1 else contextlib.nullcontext() as pool:
        result = WholeBatchPipeline(config, pool=pool).run(items, "b-secrets", MemoryDedupIndex())
    assert sorted(d.step for d in result.dropped) == ["code_quality", "exact_dedup"]
    assert {d.meta.get("domain") for d in result.dropped + result.kept} == {"code"}
    client, prefix = stack.s3_client(), f"it-{uuid.uuid4().hex[:8]}/"
    published = publish_batch(client, stack.bucket, batch_id="b-secrets", shard_dir=f"{prefix}shards/",
                              exclusions_dir=f"{prefix}exclusions/", result=result, config=config, input_keys=[])  # fmt: skip
    raw = client.get_object(Bucket=stack.bucket, Key=published.manifest.exclusions)["Body"].read()
    sink = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read().decode()
    shard = client.get_object(Bucket=stack.bucket, Key=published.manifest.shards[0].key)["Body"].read()
    (kept,) = read_shard(shard)
    assert [s for s in SECRETS if s in kept["text"]] == []
    records = [json.loads(line) for line in sink.splitlines()]
    assert len(records) == 2 and [s for s in SECRETS if s in sink] == []
    mask = config.profiles.code.secrets.mask
    assert all(r["text"].count(mask) == kept["text"].count(mask) == 2 for r in records)
