"""Prometheus and its Pushgateway, from Debian's `prometheus` and `prometheus-pushgateway` packages.

One service, two processes: the Pushgateway holds what short-lived Dagster steps push (`metrics.push_job_totals`),
the server scrapes it, itself, and the trainer ranks listed in `prometheus/targets/*.json` (file service
discovery), and evaluates the alerting rules of `deploy/prometheus/alerts.yml`. The scrape config is
`deploy/prometheus/prometheus.yml`, rendered into the state dir at start. Not a default service:
`pipeline-project stack up --services prometheus`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from string import Template

from pipeline_project.stack.errors import StackError
from pipeline_project.stack.processes import ManagedProcess, http_get
from pipeline_project.stack.service import Service, ServiceStatus

TRAINER_RANKS_SCRAPED = 8  # ports base .. base+7: one node's ranks


def _binary(name: str) -> str:
    """The program's path (PATH, then /usr/bin); the bare name when it is not installed (`prepare` says so)."""
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else name)


def _url(host: str, port: int) -> str:
    return f"http://{host}:{port}"


class PrometheusService(Service):
    name = "prometheus"

    @property
    def config_file(self) -> Path:
        return self.dir / "prometheus.yml"

    @property
    def targets_dir(self) -> Path:
        return self.dir / "targets"

    def processes(self) -> list[ManagedProcess]:
        cfg = self.config
        return [
            ManagedProcess(
                name="prometheus",
                cmd=(
                    _binary("prometheus"),
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    "--storage.tsdb.retention.time=7d",
                    f"--web.listen-address={cfg.address('prometheus')}:{cfg.prometheus_port}",
                    "--web.enable-lifecycle",
                ),
                pid_file=self.dir / "prometheus.pid",
                log_file=self.dir / "prometheus.log",
                ports=(cfg.prometheus_port,),
                cwd=self.dir,
            ),
            ManagedProcess(
                name="pushgateway",
                cmd=(
                    _binary("prometheus-pushgateway"),
                    f"--web.listen-address={cfg.address('prometheus')}:{cfg.pushgateway_port}",
                    f"--persistence.file={self.dir / 'pushgateway.data'}",
                    "--persistence.interval=30s",
                ),
                pid_file=self.dir / "pushgateway.pid",
                log_file=self.dir / "pushgateway.log",
                ports=(cfg.pushgateway_port,),
                cwd=self.dir,
            ),
        ]

    def prepare(self) -> None:
        for binary in ("prometheus", "prometheus-pushgateway"):
            if not Path(_binary(binary)).is_absolute():
                raise StackError(f"{binary} is not installed: run scripts/setup.sh (it installs Debian's {binary})")
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.config
        deploy = cfg.repo_root / "deploy" / "prometheus"
        self.config_file.write_text(
            Template((deploy / "prometheus.yml").read_text()).substitute(
                prometheus=f"{cfg.address('prometheus')}:{cfg.prometheus_port}",
                pushgateway=f"{cfg.address('prometheus')}:{cfg.pushgateway_port}",
                targets_dir=str(self.targets_dir),
                rules=str(deploy / "alerts.yml"),
            )
        )
        base = cfg.trainer_metrics_port
        trainer = self.targets_dir / "trainer.json"
        if base:
            targets = [f"{cfg.host}:{base + r}" for r in range(TRAINER_RANKS_SCRAPED)]
            trainer.write_text(json.dumps([{"targets": targets, "labels": {"component": "trainer"}}], indent=1))
        else:
            trainer.unlink(missing_ok=True)

    def status(self) -> list[ServiceStatus]:
        cfg = self.config
        out = []
        for mp, port in zip(self.processes(), (cfg.prometheus_port, cfg.pushgateway_port), strict=True):
            url = _url(cfg.address("prometheus"), port)
            answer = http_get(url + "/-/ready")
            out.append(
                ServiceStatus(
                    name=mp.name,
                    service=self.name,
                    healthy=answer is not None and answer[0] == 200,
                    url=url,
                    pid=mp.pid,
                    detail="scrape config from deploy/prometheus/prometheus.yml" if mp.name == "prometheus" else "",
                )
            )
        return out
