"""MLflow tracking server: sqlite backend store, artifacts proxied into a bucket on the S3 server."""

from __future__ import annotations

import sys

from pipeline_project.stack.processes import ManagedProcess, http_get
from pipeline_project.stack.service import Service, ServiceStatus


class MlflowService(Service):
    name = "mlflow"

    def processes(self) -> list[ManagedProcess]:
        cfg = self.config
        return [
            ManagedProcess(
                name="mlflow",
                cmd=(
                    sys.executable,
                    "-m",
                    "mlflow",
                    "server",
                    "--host",
                    cfg.address("mlflow"),
                    "--port",
                    str(cfg.mlflow_port),
                    "--workers",
                    "1",
                    "--backend-store-uri",
                    f"sqlite:///{self.dir / 'mlflow.db'}",
                    "--serve-artifacts",
                    "--artifacts-destination",
                    f"s3://{cfg.mlflow_artifacts_bucket}/",
                ),
                pid_file=self.dir / "mlflow.pid",
                log_file=self.dir / "mlflow.log",
                ports=(cfg.mlflow_port,),
                env={
                    "MLFLOW_S3_ENDPOINT_URL": cfg.s3_endpoint,
                    "AWS_ACCESS_KEY_ID": cfg.s3_access_key,
                    "AWS_SECRET_ACCESS_KEY": cfg.s3_secret_key,
                    "AWS_DEFAULT_REGION": "us-east-1",
                    # MLflow 3's job runner (GenAI scoring jobs) forks 7 huey consumers, ~240 MB and a full
                    # `import mlflow` each: the pipeline never uses it, and it doubled the server's start-up CPU.
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                },
                cwd=self.dir,
                stop_timeout=15.0,
            )
        ]

    def prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def status(self) -> list[ServiceStatus]:
        (mp,) = self.processes()
        answer = http_get(self.config.mlflow_url + "/health")
        healthy = answer is not None and answer[0] == 200
        return [
            ServiceStatus(
                name="mlflow",
                service=self.name,
                healthy=healthy,
                url=self.config.mlflow_url,
                pid=mp.pid,
                detail=f"artifacts -> s3://{self.config.mlflow_artifacts_bucket}/",
            )
        ]
