"""Objects overwritten after the sensor took them, counted by content hash (bench/reliability.py --kinds overwrite).

The raw S3 sensor is evaluated tick by tick (`build_sensor_context`, the `Daemon` of test_sensor_ticks) against a
stack's real S3 server. Objects are uploaded, taken, and some are overwritten `delay_s` after the tick (some of
them twice). Every version a listing could see is counted by the sha256 of its bytes over all batch manifests:
the last version of every key must be in exactly one manifest entry (else lost / duplicated); a version replaced
before any tick listed it may be missing (`superseded`), but never twice.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass

from pipeline_project.defs.resources.layout import IntakeConfig


@dataclass
class OverwriteResult:
    kind: str
    timing_s: float
    objects: int
    versions: int
    blocks_claimed: int  # last versions, each to be in one manifest entry
    blocks_found: int  # of them, found in a manifest
    lost: int
    duplicated: int  # manifest entries beyond the first of any version
    superseded: int  # intermediate versions no listing saw
    ticks: int
    ok: bool

    def to_dict(self) -> dict:
        return asdict(self)


def overwrite_after_take(stack, *, delay_s: float, objects: int = 20, overwrites: int = 8, seed: int = 0):
    import dagster as dg

    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.ingest.manifest import read_manifest
    from pipeline_project_harness.reliability.sensor_daemon import Daemon

    rng = random.Random(seed)
    settings = stack.settings()
    res = build_resources(settings)
    s3 = res["s3"].process_config_and_initialize().get_client()
    layout = PipelineLayout(raw_prefix=f"ow-{uuid.uuid4().hex[:8]}/raw/", intake=IntakeConfig(full_scan_every=1))
    sha_of_etag: dict[str, str] = {}
    last: dict[str, str] = {}

    def put(key: str) -> None:
        body = f"{key} version {rng.random()} ".encode() * 20
        etag = s3.put_object(Bucket=layout.bucket, Key=key, Body=body)["ETag"].strip('"')
        sha_of_etag[etag] = last[key] = hashlib.sha256(body).hexdigest()

    keys = [f"{layout.raw_prefix}{rng.choice(['a', 'm', 'z'])}/{i:04d}.txt" for i in range(objects)]
    with dg.instance_for_test() as instance:
        daemon = Daemon(instance, {"s3": res["s3"], "layout": layout})
        for key in keys:
            put(key)
        daemon.tick()
        time.sleep(delay_s)
        for key in rng.sample(keys, overwrites):
            put(key)
        daemon.tick()
        for key in rng.sample(keys, overwrites // 2):  # some overwritten again, some for the first time
            put(key)
        ticks, idle = 2, 0
        while idle < 3 and ticks < 40:
            before = len(daemon.run_keys)
            daemon.tick()
            ticks += 1
            idle = idle + 1 if len(daemon.run_keys) == before else 0
        entries = Counter(
            sha_of_etag.get(o.etag, "?")
            for b in instance.get_dynamic_partitions(batches.name)
            for o in read_manifest(s3, layout.bucket, b).objects
        )
    finals = set(last.values())
    found = sum(1 for sha in finals if entries[sha])
    duplicated = sum(n - 1 for n in entries.values() if n > 1)
    superseded = sum(1 for sha in sha_of_etag.values() if sha not in finals and not entries[sha])
    lost = len(finals) - found
    return OverwriteResult("overwrite", delay_s, objects, len(sha_of_etag), len(finals), found, lost, duplicated,
                           superseded, ticks, ok=lost == 0 and duplicated == 0 and "?" not in entries)  # fmt: skip
