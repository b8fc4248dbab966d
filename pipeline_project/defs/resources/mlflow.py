"""MLflow tracking as a Dagster resource: a thin holder of an `MlflowClient`.

dagster-mlflow's `mlflow_tracking` ends runs early (dagster issue 21872), so this stays small and explicit.
Experiments are created through the training package's race-safe `get_or_create_experiment`, and run URLs
come from its `run_url`, so the trainer and the Dagster layer agree on both. mlflow is imported inside the
methods: sensors load this module in the code server.
"""

from __future__ import annotations

import time
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from pipeline_project.settings import DEFAULT_INGEST_EXPERIMENT, DEFAULT_TRAINING_EXPERIMENT


class MlflowResource(dg.ConfigurableResource):
    tracking_uri: str
    experiment_name: str = DEFAULT_TRAINING_EXPERIMENT
    ingest_experiment_name: str = DEFAULT_INGEST_EXPERIMENT

    _client: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=self.tracking_uri)

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def experiment_id(self, name: str | None = None) -> str:
        from pipeline_project.training.tracking.run import get_or_create_experiment

        return get_or_create_experiment(self.client, name or self.experiment_name)

    def run_url(self, run_id: str, experiment_id: str) -> str:
        from pipeline_project.training.tracking.run import run_url

        return run_url(self.tracking_uri, experiment_id, run_id)

    def log_ingest_run(
        self, *, run_name: str, tags: dict[str, str], params: dict[str, Any], metrics: dict[str, float]
    ) -> str:
        """One finished MLflow run for a non-training step (the Kafka produce); returns its URL."""
        from mlflow.entities import Metric, Param, RunTag

        exp_id = self.experiment_id(self.ingest_experiment_name)
        run = self.client.create_run(exp_id, run_name=run_name, tags=tags)
        run_id = run.info.run_id
        try:
            self.client.log_batch(
                run_id,
                metrics=[Metric(k, float(v), int(time.time() * 1000), 0) for k, v in metrics.items() if v is not None],
                params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                tags=[RunTag(k, str(v)) for k, v in tags.items()],
            )
        finally:
            self.client.set_terminated(run_id)
        return self.run_url(run_id, exp_id)
