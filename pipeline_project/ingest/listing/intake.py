"""One tick of intake: plan the tick's batches (`plan.plan_batches`), then write each one's immutable manifest.

The caller (the raw S3 sensor) registers what this returns, the partitions, their runs and the cursor, all from
one `SensorResult`, only after every manifest is written. What a crash at any point leaves:

- **before or while the manifests are written** (the tick raises, times out, or its process dies): nothing is
  registered and the stored cursor stays where it was. The next tick lists the same objects in the same order
  from it and cuts the same batches (`packing.Packer` cuts by the objects and their order alone), so
  `make_batch_id` names them the same and `write_manifest_once` returns the manifests already written instead of
  writing others. If new objects landed in between and changed a cut (a batch that was not full gains objects, or
  a scan finds a key that sorts first), the manifest of the earlier cut stays unregistered: an orphan no run
  reads. Each object is registered once, in the new cut.
- **after the sensor returned**: Dagster adds the partitions, then stores the run requests with the cursor in the
  tick, and resumes an interrupted tick's run requests (run key = batch id: one run per batch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipeline_project.ingest.listing.cursor import Limits, TickCursor
from pipeline_project.ingest.listing.plan import plan_batches
from pipeline_project.ingest.manifest import BatchManifest, make_batch_id, write_manifest_once


@dataclass(frozen=True)
class IntakeTick:
    """The manifests of one tick's batches, in order, and the cursor past exactly their objects."""

    manifests: tuple[BatchManifest, ...]
    cursor: TickCursor
    stopped_by: str | None = None  # "batches" or "time": the tick left objects for the next one

    @property
    def objects(self) -> int:
        return sum(len(m.objects) for m in self.manifests)

    @property
    def total_bytes(self) -> int:
        return sum(m.total_bytes for m in self.manifests)


def write_manifests(client, bucket: str, batches) -> tuple[BatchManifest, ...]:
    """Each batch's manifest in order, named by `make_batch_id`; one that is already there is kept and returned.
    Raises at the first write that fails, and then the caller must not move its cursor past any of them."""
    out = []
    for objects in batches:
        manifest = BatchManifest(batch_id=make_batch_id(list(objects)), bucket=bucket, objects=tuple(objects))
        out.append(write_manifest_once(client, manifest))
    return tuple(out)


def intake_tick(
    client, bucket: str, prefix: str, cursor: TickCursor, limits: Limits, clock=time.monotonic
) -> IntakeTick:
    """Plan up to `limits.max_batches` batches of the new objects under `prefix` and write their manifests."""
    plan = plan_batches(client, bucket, prefix, cursor, limits, clock)
    return IntakeTick(write_manifests(client, bucket, plan.batches), plan.cursor, plan.stopped_by)
