"""The jobs the sensors and the UI launch.

`ingest_batch` runs a batch's three ingest assets (and their checks) in one process. They run one after
another anyway, so the multiprocess executor's step subprocesses add nothing but their start-up: each
imports the code location again, seconds per step on a small machine, and a new object waits for all of it
(bench/arrival_latency.py). Steps still retry by their RetryPolicy, and run retries relaunch a failed run.
"""

import dagster as dg

from pipeline_project.defs.assets.checkpoint import deepseek_checkpoint
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.assets.token_blocks import token_blocks
from pipeline_project.defs.partitions import INGEST_RUN_TAGS, TRAINING_RUN_TAGS, with_max_runtime
from pipeline_project.settings import Settings

INGEST_SELECTION = [raw_text, cleaned_shards, token_blocks]
_settings = Settings()
INGEST_JOB_TAGS = with_max_runtime(INGEST_RUN_TAGS, _settings.ingest_max_runtime_s)
TRAINING_JOB_TAGS = with_max_runtime(TRAINING_RUN_TAGS, _settings.training_max_runtime_s)

ingest_batch = dg.define_asset_job(
    "ingest_batch",
    selection=INGEST_SELECTION,  # partitioned by `batches`, inferred from the assets
    tags=INGEST_JOB_TAGS,
    executor_def=dg.in_process_executor,
    description="One batch: raw_text -> cleaned_shards -> token_blocks and their checks, in one process.",
)

train_checkpoint = dg.define_asset_job("train_checkpoint", selection=[deepseek_checkpoint], tags=TRAINING_JOB_TAGS)
