"""Java runtimes of the stack: Maven Central jars resolved by `deploy/local/<name>/pom.xml`."""

from __future__ import annotations

import fcntl
import hashlib
import os
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
    """Copy the component's jars into target/jars with Maven if they are not there yet.

    Processes that start services at the same moment (a test tier and the cluster tier beside it) serialise on
    a lock file, and the stamp is replaced atomically: a reader never sees a half-written stamp and refetches
    (deleting the jars under a JVM that is loading them).
    """
    target = jars_dir(component)
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".jars.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _fetch_if_stale(component, target)
    return target


def _fetch_if_stale(component: str, target: Path) -> None:
    pom = DEPLOY_DIR / component / "pom.xml"
    stamp = target / ".pom.sha256"
    digest = pom_digest(component)
    if target.is_dir() and any(target.glob("*.jar")):
        if not stamp.exists():
            # Fetched by scripts/setup.sh (plain mvn) from this pom: adopt it.
            _write_stamp(stamp, digest)
        if stamp.read_text() == digest:
            return
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
    _write_stamp(stamp, digest)


def _write_stamp(stamp: Path, digest: str) -> None:
    staging = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
    staging.write_text(digest)
    os.replace(staging, stamp)


def java() -> str:
    path = shutil.which("java")
    if path is None:
        raise StackError("`java` (17+) is not on PATH; the Kafka brokers and s3proxy need it")
    return path
