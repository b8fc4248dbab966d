"""The stack's jar fetch under concurrent starts (a test tier and the cluster tier beside it)."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipeline_project.stack import jars


def test_concurrent_starts_adopt_fetched_jars_without_refetching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Jars fetched by setup.sh (no stamp yet), adopted by many starts at once: none refetches or fails.

    A reader that saw the stamp half written used to delete the jars and call Maven, while the other
    process's JVM loaded classes from them (CI: `ClassNotFoundException: kafka.tools.StorageTool`).
    """
    monkeypatch.setattr(jars, "DEPLOY_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-mvn-here"))
    failures = []
    for _ in range(100):
        component = tmp_path / "kafka"
        (component / "target" / "jars").mkdir(parents=True)
        (component / "pom.xml").write_text("<project/>")
        jar = component / "target" / "jars" / "kafka.jar"
        jar.write_text("classes")
        with ThreadPoolExecutor(8) as pool:
            outcomes = [pool.submit(jars.ensure_jars, "kafka") for _ in range(8)]
        failures += [repr(f.exception()) for f in outcomes if f.exception() is not None]
        assert jar.read_text() == "classes"
        assert (component / "target" / "jars" / ".pom.sha256").read_text() == jars.pom_digest("kafka")
        shutil.rmtree(component)
    assert failures == []


def test_a_changed_pom_without_maven_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(jars, "DEPLOY_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-mvn-here"))
    (tmp_path / "kafka" / "target" / "jars").mkdir(parents=True)
    (tmp_path / "kafka" / "pom.xml").write_text("<project>v2</project>")
    (tmp_path / "kafka" / "target" / "jars" / "kafka.jar").write_text("classes")
    (tmp_path / "kafka" / "target" / "jars" / ".pom.sha256").write_text("digest-of-v1")
    with pytest.raises(jars.StackError, match="mvn"):
        jars.ensure_jars("kafka")
