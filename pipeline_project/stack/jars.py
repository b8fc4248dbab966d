"""Java runtimes of the stack: Maven Central jars resolved by `deploy/local/<name>/pom.xml`."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from pipeline_project.stack.config import REPO_ROOT
from pipeline_project.stack.errors import StackError

DEPLOY_DIR = REPO_ROOT / "deploy" / "local"


def jars_dir(component: str) -> Path:
    return DEPLOY_DIR / component / "target" / "jars"


def classpath(component: str) -> str:
    return str(jars_dir(component) / "*")


def pom_digest(component: str) -> str:
    return hashlib.sha256((DEPLOY_DIR / component / "pom.xml").read_bytes()).hexdigest()


def ensure_jars(component: str) -> Path:
    """Copy the component's jars into target/jars with Maven if they are not there yet."""
    target = jars_dir(component)
    pom = DEPLOY_DIR / component / "pom.xml"
    stamp = target / ".pom.sha256"
    digest = pom_digest(component)
    if target.is_dir() and any(target.glob("*.jar")):
        if not stamp.exists():
            # Fetched by scripts/setup.sh (plain mvn) from this pom: adopt it.
            stamp.write_text(digest)
        if stamp.read_text() == digest:
            return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(f"{target} is missing and `mvn` is not on PATH to fetch the {component} jars")
    if target.exists():
        shutil.rmtree(target)  # a stale set could mix versions of the same library
    result = subprocess.run(
        [mvn, "-q", "-B", "dependency:copy-dependencies"],
        cwd=pom.parent,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        last = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
        raise StackError(f"mvn copy-dependencies failed in {pom.parent}: {last[0]}")
    stamp.write_text(digest)
    return target


def java() -> str:
    path = shutil.which("java")
    if path is None:
        raise StackError("`java` (17+) is not on PATH; the Kafka brokers and s3proxy need it")
    return path
