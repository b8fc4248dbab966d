"""Takedown requests (issue 40 section 3): a source object, a document or a text -> every exact and near copy in
the corpus (`resolve`), the blocks of the token topic holding the kept ones (`blocks`), retracted under one request
(`streaming.retractions`), the texts put on the cleaning's blocklist (`blocklist`, `cleaning.dedup.blocklist`), and
the exposure report from the checkpoints' step logs (`exposure`, `report`), stored in S3 next to the request.
`why` answers for one document, read only. Operator actions: they return data and print nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline_project.ops.takedown.apply import Stores, takedown
from pipeline_project.ops.takedown.report import ExposureReport, TakedownRequest
from pipeline_project.ops.takedown.why import why
from pipeline_project.settings import Settings

__all__ = ["ExposureReport", "Stores", "TakedownRequest", "open_stores", "takedown", "why"]


def open_stores(
    settings: Settings,
    *,
    config=None,
    dedup_schema: str = "dedup",
    shards_prefix: str = "shards/",
    checkpoints_root: str = "checkpoints",
    lineages: Sequence[str] | None = None,
    topic: str | None = None,
    tag_mlflow: bool = True,
) -> Stores:
    """The stores of the running deployment (close them): its S3, topic, dedup index, blocklist and ledger index."""
    from pipeline_project.cleaning.dedup.blocklist import PostgresBlocklist
    from pipeline_project.cleaning.dedup.opening import open_index
    from pipeline_project.ops import connect
    from pipeline_project.ops.retune import load_config
    from pipeline_project.ops.takedown.corpus import Corpus

    if config is None:
        from pipeline_project.cleaning.config import CleaningConfig

        path = settings.cleaning_config_path
        config = load_config(Path(path)) if path else CleaningConfig()
    mh = config.dedup.minhash
    kafka, name, ledger_index = connect.ledger(settings, topic)
    # the index and blocklist the cleaning uses, opened the way the asset opens them (one index or its shards)
    index = open_index(
        settings.postgres_url,
        settings.dedup_shard_urls,
        num_perm=mh.num_buckets * mh.hashes_per_bucket,
        num_bands=mh.num_buckets,
        schema=dedup_schema,
    )
    blocklist = PostgresBlocklist(settings.postgres_url, schema=dedup_schema)
    s3 = settings.s3_client()
    return Stores(
        s3=s3,
        bucket=settings.bucket,
        kafka=kafka,
        topic=name,
        index=index,
        blocklist=blocklist,
        ledger_index=ledger_index,
        config=config,
        corpus=Corpus(s3, settings.bucket, shards_prefix),
        checkpoints_root=checkpoints_root,
        lineages=lineages,
        closers=[index.close, blocklist.close, ledger_index.close],
        mlflow=_mlflow_client(settings) if tag_mlflow else None,
    )


def _mlflow_client(settings: Settings):
    """The deployment's MLflow, where its checkpoints' model versions are (None when it names none)."""
    if not settings.mlflow_tracking_uri:
        return None
    from mlflow.tracking import MlflowClient

    return MlflowClient(settings.mlflow_tracking_uri)
