"""One unreadable object is quarantined with its reason; the rest of its batch is cleaned (issue 27).

The real s3proxy deletes and replaces objects after the manifest was written (NoSuchKey; If-Match fails on the
new ETag). AccessDenied and InvalidObjectState, which s3proxy cannot produce, come from a botocore `before-call`
hook on the same real client: the request for those keys is answered with S3's error instead of being sent.
"""

import io
import json
import random
from types import SimpleNamespace

import dagster as dg
import pytest
import zstandard
from dagster_aws.s3 import S3Resource

from pipeline_project.definitions import defs
from pipeline_project.defs.assets import cleaned
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import prose_document

pytestmark = pytest.mark.stack


class FaultyS3Resource(S3Resource):
    """A real client to the stack's S3 whose GetObject answers `faults[key]` (an S3 error code) for the keys named."""

    faults: dict[str, str] = {}  # noqa: RUF012 (pydantic copies field defaults)

    def get_client(self):
        client = super().get_client()
        faults = self.faults

        def note_key(params, context, **_):
            context["fault"] = faults.get(params.get("Key", ""))

        def answer(context, **_):
            code = context.get("fault")
            if code is None:
                return None
            http = SimpleNamespace(status_code=403, headers={}, content=b"")
            return http, {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": 403}}

        client.meta.events.register("before-parameter-build.s3.GetObject", note_key)
        client.meta.events.register("before-call.s3.GetObject", answer)
        return client


def _exclusions(s3, bucket: str, url: str) -> list[dict]:
    data = s3.get_object(Bucket=bucket, Key=url.removeprefix(f"s3://{bucket}/"))["Body"].read()
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        return [json.loads(line) for line in reader.read().decode().splitlines()]


def test_unreadable_objects_are_quarantined_with_their_reason_and_counts_add_up(instance, resources, layout, s3):
    rng = random.Random(7)
    names = ["good.txt", "denied.txt", "archived.txt", "gone.txt", "replaced.txt"]
    for name in names:
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + name, Body=prose_document(rng, "en", 3).encode())
    good = (
        json.dumps({"text": prose_document(rng, "en", 3)})
        + "\n"
        + json.dumps({"text": prose_document(rng, "en", 3)})
        + "\n"
    )
    s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + "good2.jsonl", Body=good.encode())
    with dg.build_sensor_context(instance=instance, resources={k: resources[k] for k in ("s3", "layout")},
                                 definitions=defs) as ctx:  # fmt: skip
        batch = raw_s3_sensor(ctx).run_requests[0].partition_key
    instance.add_dynamic_partitions("batches", [batch])
    s3.delete_object(Bucket=layout.bucket, Key=layout.raw_prefix + "gone.txt")
    s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + "replaced.txt", Body=b"another version")

    faults = {
        layout.raw_prefix + "denied.txt": "AccessDenied",
        layout.raw_prefix + "archived.txt": "InvalidObjectState",
    }
    faulty = FaultyS3Resource(**resources["s3"].model_dump(), faults=faults)
    checks = dg.load_asset_checks_from_modules([cleaned])
    result = dg.materialize(
        [raw_text, cleaned_shards, *checks],
        resources={**resources, "s3": faulty},
        partition_key=batch,
        instance=instance,
    )
    assert result.success
    meta = {
        e.materialization.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
    }  # fmt: skip
    c = meta["cleaned_shards"]
    assert c["documents_in"] == c["kept"] + c["dropped"] + c["quarantined"] == 3 + 4
    assert c["quarantined"] == 4 and c["kept"] + c["dropped"] == 3
    reasons = {r["source"].removeprefix(layout.raw_prefix): (r["reason"], r["detail"]) for r in
               _exclusions(s3, layout.bucket, c["exclusions"]) if r.get("reason", "").startswith("object_")}  # fmt: skip
    assert {k: v[0] for k, v in reasons.items()} == {
        "denied.txt": "object_access_denied",
        "archived.txt": "object_archived",
        "gone.txt": "object_missing",
        "replaced.txt": "object_changed",
    }
    assert "AccessDenied" in reasons["denied.txt"][1] and "InvalidObjectState" in reasons["archived.txt"][1]
    assert all(e.passed for e in result.get_asset_check_evaluations())
