"""The part of dagster-daemon the raw S3 sensor relies on, ticked by hand so a test can stop or kill it between or
inside ticks."""

from __future__ import annotations

from collections import Counter

import dagster as dg

from pipeline_project.definitions import defs
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor


class Daemon:
    """The part of dagster-daemon the sensor relies on: stored cursor, registered partitions, run keys."""

    def __init__(self, instance, resources):
        self.instance = instance
        self.resources = resources
        self.cursor: str | None = None
        self.run_keys: Counter = Counter()

    def tick(self, *, crash_before_storing: bool = False) -> None:
        with dg.build_sensor_context(instance=self.instance, cursor=self.cursor, resources=self.resources,
                                     definitions=defs) as ctx:  # fmt: skip
            result = raw_s3_sensor(ctx)
        if crash_before_storing:  # the manifest is in S3; the daemon died before recording anything
            return
        for request in result.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for run in result.run_requests or []:
            self.run_keys[run.run_key] += 1
        self.cursor = result.cursor
