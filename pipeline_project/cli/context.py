"""What a command runs against: the settings of this machine's environment (the local stack's S3 while it runs,
when no endpoint is set) and the Dagster instance that ran the batches."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pipeline_project.settings import Settings
from pipeline_project.stack.discovery import with_local_s3


def settings() -> Settings:
    return with_local_s3(Settings())


class NoInstanceError(RuntimeError):
    """No Dagster instance is configured where the command looked: it refuses rather than read an empty one."""


def dagster_home(home: Path | None) -> Path:
    """The instance folder a command reads: `home`, else $DAGSTER_HOME, else the local stack's. It must hold a
    dagster.yaml (Dagster would otherwise make an empty instance there, and the command would report nothing)."""
    if home is None and os.environ.get("DAGSTER_HOME"):
        home = Path(os.environ["DAGSTER_HOME"])
    if home is None:
        from pipeline_project.stack import Stack

        home = Stack().services["dagster"].home
    if not (Path(home) / "dagster.yaml").is_file():
        raise NoInstanceError(
            f"no Dagster instance at {home} (no dagster.yaml): set DAGSTER_HOME (or --dagster-home) to the "
            "deployment's instance folder, or start the local one with `pipeline-project stack up`"
        )
    return Path(home)


def dagster_instance(home: Path | None) -> AbstractContextManager[Any]:
    """The Dagster instance at `dagster_home(home)`."""
    from pipeline_project.defs.instance import open_instance

    return open_instance(dagster_home(home))


def describe_instance(instance: Any) -> str:
    """Which instance a command read: its folder and where its run storage lives (a password never shown)."""
    storage = instance.run_storage
    url = getattr(storage, "postgres_url", None)
    if url:
        from sqlalchemy.engine import make_url

        where = f"PostgreSQL {make_url(url).render_as_string(hide_password=True)}"
    else:
        where = type(storage).__name__
    return f"Dagster instance {instance.root_directory} ({where})"
