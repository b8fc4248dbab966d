"""The batches one training invocation may read, passed by reference: an S3 object, never inside the job.

The job (`JobConfig`) travels in an environment variable (Linux refuses one over 128 KiB) or a ConfigMap (1 MiB);
the backlog grows with the untrained batches, about 300 bytes each (10^5 batches: ~30 MB). The launching side
writes it, zstd-compressed JSON, next to the lineage's checkpoints (`backlog_key`) and puts its URI and size in the
job (`by_reference`). Rank 0 of the trainer reads it back (`resolved`): only rank 0 uses it (MLflow's inputs and
the lineage tags of a model version), so one invocation reads it once, whatever its world size. Nothing per batch
travels in an environment variable, a command line or a ConfigMap.

No torch, no dagster: the code server writes it, the trainer reads it.
"""

from __future__ import annotations

import zstandard
from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.common.s3 import split_s3_uri
from pipeline_project.training.job import JobConfig

BACKLOG_NAME = "backlog.json.zst"


class Backlog(BaseModel):
    """The per-batch part of a job: which batches, where their manifests are, which offsets they hold."""

    model_config = ConfigDict(extra="forbid")

    partitions: list[str] = Field(default_factory=list)
    shard_manifests: dict[str, str] = Field(default_factory=dict)
    batch_offsets: dict[str, dict[str, list[int]]] = Field(default_factory=dict)

    @classmethod
    def of(cls, job: JobConfig) -> Backlog:
        return cls(partitions=job.partitions, shard_manifests=job.shard_manifests, batch_offsets=job.batch_offsets)


def backlog_key(checkpoint_prefix: str, run_id: str) -> str:
    """Where the backlog of the run `run_id` lives: under its lineage, beside (never inside) its checkpoints."""
    return f"{checkpoint_prefix.strip('/')}/jobs/{run_id}/{BACKLOG_NAME}"


def by_reference(job: JobConfig, s3, run_id: str) -> JobConfig:
    """`job` with its backlog written to S3 and replaced by its URI; a job without batches is returned as it is."""
    backlog = Backlog.of(job)
    if not backlog.partitions and not backlog.shard_manifests and not backlog.batch_offsets:
        return job
    key = backlog_key(job.checkpoint_prefix, run_id)
    body = zstandard.ZstdCompressor(level=3).compress(backlog.model_dump_json().encode())
    s3.put_object(Bucket=job.bucket, Key=key, Body=body, ContentType="application/zstd")
    return job.model_copy(
        update={
            "partitions": [],
            "shard_manifests": {},
            "batch_offsets": {},
            "backlog_uri": f"s3://{job.bucket}/{key}",
            "backlog_batches": len(backlog.partitions),
        }
    )


def read_backlog(s3, uri: str) -> Backlog:
    bucket, key = split_s3_uri(uri)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return Backlog.model_validate_json(zstandard.ZstdDecompressor().decompress(body))


def resolved(job: JobConfig, s3) -> JobConfig:
    """`job` with the backlog its URI names read back in (the job as it was built); a job without one as it is."""
    if job.backlog_uri is None:
        return job
    backlog = read_backlog(s3, job.backlog_uri)
    if len(backlog.partitions) != job.backlog_batches:
        raise ValueError(
            f"backlog {job.backlog_uri} holds {len(backlog.partitions)} batches, the job says {job.backlog_batches}"
        )
    return job.model_copy(update=backlog.model_dump())
