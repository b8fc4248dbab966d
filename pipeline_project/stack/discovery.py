"""Is the local stack running on this machine? Its S3 as the stack wrote it down, handed into `Settings` by the
programs a user runs from a shell (the command line), so that an unset PIPELINE_S3_ENDPOINT means the local
stack while it runs and AWS S3 otherwise. The stack's own processes get the endpoint in their environment."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline_project.settings import Settings, is_local_endpoint, stack_state_dir


def default_stack_state_dir() -> Path:
    """PIPELINE_STATE_DIR, else `.state/` beside the package (the checkout the stack runs from)."""
    raw = stack_state_dir()
    return Path(raw).expanduser().resolve() if raw else Path(__file__).resolve().parents[2] / ".state"


@dataclass(frozen=True)
class LocalS3:
    endpoint: str
    access_key: str
    secret_key: str = field(repr=False)


def running_local_s3(state_dir: Path | None = None) -> LocalS3 | None:
    """The local stack's S3 as the stack wrote it down (`<state>/s3/s3proxy.{pid,properties}`), when that very
    process still runs; None otherwise (no stack, stopped, or a stale pid file whose pid was reused)."""
    import psutil

    s3_dir = (state_dir or default_stack_state_dir()) / "s3"
    try:
        record = json.loads((s3_dir / "s3proxy.pid").read_text())
        started = psutil.Process(int(record["pid"])).create_time()
        props = dict(
            line.split("=", 1) for line in (s3_dir / "s3proxy.properties").read_text().splitlines() if "=" in line
        )
        if abs(started - float(record["create_time"])) > 0.5:
            return None
        local = LocalS3(props["s3proxy.endpoint"], props["s3proxy.identity"], props["s3proxy.credential"])
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None
    return local if is_local_endpoint(local.endpoint) else None


def with_local_s3(settings: Settings) -> Settings:
    """`settings` pointed at the local stack's S3 (endpoint and keys, whatever AWS keys the shell holds) when no
    endpoint is set and the stack's S3 runs; `settings` itself otherwise."""
    if settings.s3_endpoint is not None:
        return settings
    local = running_local_s3()
    if local is None:
        return settings
    return dataclasses.replace(
        settings, s3_endpoint=local.endpoint, s3_access_key=local.access_key, s3_secret_key=local.secret_key
    )
