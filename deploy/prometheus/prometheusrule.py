"""Writes deploy/k8s/monitoring/prometheusrule.yaml from deploy/prometheus/alerts.yml, the one source of the alerts.

    python deploy/prometheus/prometheusrule.py          # rewrite it after editing alerts.yml
pipeline_project_tests/deploy/test_monitoring.py fails while the two differ.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ALERTS = HERE / "alerts.yml"
RULE = HERE.parent / "k8s" / "monitoring" / "prometheusrule.yaml"
HEADER = (
    "# GENERATED from deploy/prometheus/alerts.yml by deploy/prometheus/prometheusrule.py: edit alerts.yml, then\n"
    "# run the script. The label `release: prometheus` is what kube-prometheus-stack's ruleSelector matches by\n"
    "# default; change it to your Prometheus' ruleSelector.\n"
)


def prometheus_rule(alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "pipeline-alerts",
            "namespace": "pipeline",
            "labels": {"app.kubernetes.io/part-of": "pipeline", "release": "prometheus"},
        },
        "spec": {"groups": alerts["groups"]},
    }


def render() -> str:
    rule = prometheus_rule(yaml.safe_load(ALERTS.read_text()))
    return HEADER + yaml.safe_dump(rule, sort_keys=False, width=120)


def main() -> int:
    RULE.write_text(render())
    print(f"wrote {RULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
