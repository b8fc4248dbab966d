"""libpq's timeouts are declared once (`common/postgres.py`) and reach every PostgreSQL client: the URL-only clients
(Dagster's storage) through `with_timeouts`, the Kubernetes instance config through its `params`. Behaviour under a
real partition: `cluster/test_pg_faults.py`."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import yaml

from pipeline_project.common.postgres import connect_kwargs, with_timeouts
from pipeline_project.stack.config import REPO_ROOT


def test_with_timeouts_adds_what_the_url_lacks_and_keeps_what_it_sets():
    url = with_timeouts("postgresql+psycopg2://u:p@db:5432/dagster?connect_timeout=3&sslmode=require")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    assert (parts.scheme, parts.netloc, parts.path) == ("postgresql+psycopg2", "u:p@db:5432", "/dagster")
    assert query["connect_timeout"] == "3" and query["sslmode"] == "require"
    assert {k: int(v) for k, v in query.items() if k not in ("connect_timeout", "sslmode")} == {
        k: v for k, v in connect_kwargs().items() if k != "connect_timeout"
    }


def test_the_kubernetes_instance_config_sets_the_same_timeouts():
    config = yaml.safe_load((REPO_ROOT / "deploy" / "dagster" / "dagster.yaml").read_text())
    assert config["storage"]["postgres"]["postgres_db"]["params"] == connect_kwargs()
