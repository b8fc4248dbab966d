"""Monitoring off the laptop: deploy/k8s/monitoring against Kubernetes' and prometheus-operator's CRD schemas,
the PrometheusRule generated from deploy/prometheus/alerts.yml, the trainer's metrics ports and the monitors that
select them, Kafka's metrics in Strimzi, and compose's Prometheus, Pushgateway and Grafana."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from pipeline_project.defs.resources.launchers import k8s_pod_meta, render_k8s_pod
from pipeline_project_tests.deploy import pod_env
from pipeline_project_tests.deploy.helpers import (
    COMPOSE,
    DEPLOY,
    IMAGES,
    MONITORING_KINDS,
    REPO,
    k8s_manifests,
    validate_k8s,
    validate_monitoring,
    validate_strimzi,
)

MONITORING = k8s_manifests("monitoring")


def _ids(items):
    return [f"{path.name}:{doc['kind']}/{doc['metadata']['name']}" for path, doc in items]


@pytest.mark.parametrize(("path", "doc"), MONITORING, ids=_ids(MONITORING))
def test_monitoring_manifests_fit_their_schemas(path, doc):
    assert doc["metadata"]["namespace"] == "pipeline"
    if doc["kind"] in MONITORING_KINDS:
        validate_monitoring(doc)
    else:
        validate_k8s(doc)


def _one(kind: str, name: str) -> dict:
    (doc,) = [d for _, d in MONITORING if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_the_crd_validator_rejects_a_misspelt_field():
    monitor = copy.deepcopy(_one("PodMonitor", "pipeline-trainer"))
    monitor["spec"]["podMetricEndpoints"] = monitor["spec"].pop("podMetricsEndpoints")
    with pytest.raises(jsonschema.ValidationError):
        validate_monitoring(monitor)


def _rule_script():
    spec = importlib.util.spec_from_file_location("prometheusrule", DEPLOY / "prometheus" / "prometheusrule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_prometheus_rule_is_generated_from_alerts_yml():
    script = _rule_script()
    committed = (DEPLOY / "k8s" / "monitoring" / "prometheusrule.yaml").read_text()
    assert committed == script.render(), "run: python deploy/prometheus/prometheusrule.py"
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    assert _one("PrometheusRule", "pipeline-alerts")["spec"]["groups"] == alerts["groups"]


def _labels_match(selector: dict, labels: dict) -> bool:
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    return ok and all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


def test_the_trainer_pod_declares_the_metrics_ports_the_pod_monitor_keeps():
    settings = pod_env.settings_data()
    launch = pod_env.trainer_launch()
    assert launch.metrics_port == int(settings["PIPELINE_METRICS_PORT"]) > 0
    from pipeline_project_tests.deploy.test_trainer_job_env import _job

    pod = render_k8s_pod(launch, _job())  # as PipesK8sClient builds it
    validate_k8s(pod)
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports == {f"metrics-r{i}": launch.metrics_port + i for i in range(launch.gpus_per_pod)}
    monitor = _one("PodMonitor", "pipeline-trainer")
    assert _labels_match(monitor["spec"]["selector"], k8s_pod_meta(launch)["labels"])
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    keep = next(r for r in endpoint["relabelings"] if r["action"] == "keep")
    assert all(re.fullmatch(keep["regex"], name) for name in ports)
    assert not re.fullmatch(keep["regex"], "rdzv")


def test_the_pushgateway_service_is_what_the_settings_and_the_service_monitor_name():
    service = _one("Service", "pushgateway")
    deployment = _one("Deployment", "pushgateway")
    (port,) = service["spec"]["ports"]
    assert pod_env.settings_data()["PIPELINE_PUSHGATEWAY_URL"] == f"http://pushgateway.pipeline.svc:{port['port']}"
    assert _labels_match(
        {"matchLabels": service["spec"]["selector"]}, deployment["spec"]["template"]["metadata"]["labels"]
    )
    monitor = _one("ServiceMonitor", "pipeline-pushgateway")
    assert _labels_match(monitor["spec"]["selector"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["honorLabels"] is True


def test_kafka_serves_broker_and_exporter_metrics():
    kafka = next(d for _, d in k8s_manifests("kafka") if d["kind"] == "Kafka")
    validate_strimzi(kafka)
    ref = kafka["spec"]["kafka"]["metricsConfig"]["valueFrom"]["configMapKeyRef"]
    rules = yaml.safe_load(_one("ConfigMap", ref["name"])["data"][ref["key"]])
    assert rules["rules"] and all("pattern" in r for r in rules["rules"])
    assert "kafkaExporter" in kafka["spec"]
    monitor = _one("PodMonitor", "pipeline-kafka")
    assert _labels_match(
        monitor["spec"]["selector"], {"strimzi.io/kind": "Kafka", "strimzi.io/cluster": kafka["metadata"]["name"]}
    )


def _compose() -> dict:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]


def _mounts(service: dict) -> dict[str, Path]:
    """container path -> host path, for the service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out[target] = (COMPOSE / source).resolve()
    return out


def test_compose_runs_prometheus_with_the_alerts_and_a_valid_config(tmp_path):
    services = _compose()
    assert {"prometheus", "pushgateway", "grafana"} <= set(services)
    mounts = _mounts(services["prometheus"])
    config_path = next(a.split("=", 1)[1] for a in services["prometheus"]["command"] if a.startswith("--config.file="))
    config = yaml.safe_load(mounts[config_path].read_text())
    (rules,) = config["rule_files"]
    assert mounts[rules] == (DEPLOY / "prometheus" / "alerts.yml").resolve()
    targets = {t for job in config["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    env = services["user-code"]["environment"]
    assert env["PIPELINE_PUSHGATEWAY_URL"].removeprefix("http://") in targets
    assert f"user-code:{env['PIPELINE_METRICS_PORT']}" in targets
    # promtool checks the config and the rules, with the container's paths mapped to the mounted files
    shutil.copy(mounts[rules], tmp_path / "alerts.yml")
    config["rule_files"] = [str(tmp_path / "alerts.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing (Debian package prometheus, installed by scripts/setup.sh)"
    done = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_grafana_gets_the_dashboard_and_the_datasource_provisioned():
    services = _compose()
    grafana = _mounts(services["grafana"])
    provisioning = {t: p for t, p in grafana.items() if t.startswith("/etc/grafana/provisioning/")}
    (datasource,) = yaml.safe_load(
        (provisioning["/etc/grafana/provisioning/datasources"] / "prometheus.yaml").read_text()
    )["datasources"]
    port = services["prometheus"]["ports"][0].rsplit(":", 1)[1]
    assert datasource["type"] == "prometheus" and datasource["url"] == f"http://prometheus:{port}"
    (provider,) = yaml.safe_load((provisioning["/etc/grafana/provisioning/dashboards"] / "pipeline.yaml").read_text())[
        "providers"
    ]
    dashboards = {t: p for t, p in grafana.items() if Path(t).parent == Path(provider["options"]["path"])}
    assert (DEPLOY / "grafana" / "pipeline.json").resolve() in dashboards.values()
    dashboard = json.loads((DEPLOY / "grafana" / "pipeline.json").read_text())
    assert any(v["type"] == "datasource" and v["query"] == "prometheus" for v in dashboard["templating"]["list"])


def test_the_trainer_image_has_pynvml_for_gpu_system_metrics():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^trainer = \[[^\]]*"nvidia-ml-py', pyproject, flags=re.M)
    dockerfile = (IMAGES / "trainer.Dockerfile").read_text()
    assert "ARG EXTRAS=trainer" in dockerfile and '"./[${EXTRAS}]"' in dockerfile


FLOOR_SERIES = "pipeline:train_tokens_per_second_per_gpu:floor"
THROUGHPUT_ALERT = "PipelineTrainerBelowThroughputFloor"


def _throughput_case(name: str, tokens_per_s: int, floor: int | None, fires: bool) -> dict:
    """4 ranks, rank 0 reporting the run's tokens/s, for 30 minutes."""
    series = [{"series": f'pipeline_loader_data_wait_fraction{{rank="{r}"}}', "values": "0.01x30"} for r in range(4)]
    series.append({"series": 'pipeline_train_tokens_per_second{rank="0"}', "values": f"{tokens_per_s}x30"})
    if floor is not None:
        series.append({"series": FLOOR_SERIES, "values": f"{floor}x30"})
    per_gpu = tokens_per_s // 4
    expected = [
        {
            "exp_labels": {"severity": "critical"},
            "exp_annotations": {
                "summary": f"training runs at {per_gpu} tokens/s per GPU, below the deployment's floor",
                "description": "Check the trainer's first log lines (CUDA found?), the GPUs' clocks and the data-wait "
                "fraction.",
            },
        }
    ]
    checks = [{"eval_time": "10m", "alertname": THROUGHPUT_ALERT, "exp_alerts": []}]
    checks.append({"eval_time": "20m", "alertname": THROUGHPUT_ALERT, "exp_alerts": expected if fires else []})
    return {"name": name, "interval": "1m", "input_series": series, "alert_rule_test": checks}


def test_the_throughput_alert_fires_under_the_floor_the_deployment_sets(tmp_path):
    """`promtool test rules` over alerts.yml with the cluster's floor rule: slow ranks fire after 15 minutes, fast
    ones do not, and without a floor (the local stack, compose) nothing fires."""
    floor_rule = _one("PrometheusRule", "pipeline-throughput-floor")
    (group,) = floor_rule["spec"]["groups"]
    (record,) = group["rules"]
    assert record["record"] == FLOOR_SERIES and re.fullmatch(r"vector\(\d+(\.\d+)?\)", record["expr"])
    assert floor_rule["metadata"]["labels"] == _one("PrometheusRule", "pipeline-alerts")["metadata"]["labels"]
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    (rule,) = [r for g in alerts["groups"] for r in g["rules"] if r.get("alert") == THROUGHPUT_ALERT]
    assert FLOOR_SERIES in rule["expr"] and "pipeline_train_tokens_per_second" in rule["expr"]

    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "floor.yml").write_text(yaml.safe_dump({"groups": floor_rule["spec"]["groups"]}))
    # the floor comes in as an input series: what the cluster's recording rule (floor.yml, checked below) records
    cases = [
        _throughput_case("CPU-slow ranks under the floor", tokens_per_s=2000, floor=1000, fires=True),
        _throughput_case("GPU ranks above the floor", tokens_per_s=8000, floor=1000, fires=False),
        _throughput_case("no floor set", tokens_per_s=2000, floor=None, fires=False),
    ]
    tests = {"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": cases}
    (tmp_path / "throughput_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing (Debian package prometheus, installed by scripts/setup.sh)"
    done = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "throughput_test.yml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run([promtool, "check", "rules", str(tmp_path / "floor.yml")], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 1 rules found" in check.stdout, check.stdout + check.stderr
