"""deploy/prometheus/alerts.yml: valid rules (`promtool check rules`) that fire, and stay quiet, as their unit
tests in alerts_test.yml say (`promtool test rules`), and whose every query names a series metrics.py declares."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from pipeline_project.common.metrics.prometheus import PipelineMetrics
from pipeline_project_tests.observability import dashboard

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "deploy" / "prometheus" / "alerts.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"  # Debian's prometheus package (scripts/setup.sh)


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


def test_rules_are_valid():
    out = _promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"SUCCESS: (\d+) rules found", out.stdout).group(1) == str(len(_rules()))


def test_rules_fire_as_their_unit_tests_say():
    out = _promtool("test", "rules", str(HERE / "alerts_test.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_rule_names_a_declared_series_and_has_a_unit_test():
    declared = PipelineMetrics().names()
    tested = {t["alertname"] for case in yaml.safe_load((HERE / "alerts_test.yml").read_text())["tests"]
              for t in case["alert_rule_test"]}  # fmt: skip
    for rule in _rules():
        named = dashboard.series_named(rule["expr"])
        assert named and named <= declared, f"{rule['alert']}: undeclared {sorted(named - declared)}"
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["alert"] in tested, f"{rule['alert']} has no case in alerts_test.yml"


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_the_stacks_scrape_config_loads_the_rules(tmp_path):
    """The rendered prometheus.yml, as the stack writes it, passes `promtool check config` (rule files too)."""
    from string import Template

    template = Template((RULES.parent / "prometheus.yml").read_text())
    config = tmp_path / "prometheus.yml"
    config.write_text(
        template.substitute(prometheus="127.0.0.1:1", pushgateway="127.0.0.1:2", targets_dir=tmp_path, rules=RULES)
    )
    out = _promtool("check", "config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in out.stdout
