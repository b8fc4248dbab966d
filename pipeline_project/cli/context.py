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


def dagster_instance(home: Path | None) -> AbstractContextManager[Any]:
    """The Dagster instance at `home`, else $DAGSTER_HOME's, else the local stack's."""
    from pipeline_project.defs.instance import open_instance

    if home is None and not os.environ.get("DAGSTER_HOME"):
        from pipeline_project.stack import Stack

        home = Stack().services["dagster"].home
    return open_instance(home)
