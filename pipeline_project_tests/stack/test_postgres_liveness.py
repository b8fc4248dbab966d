"""Liveness never rests on a kernel default (issue 37 finding 3): every PostgreSQL the project runs bounds how long a
dead or cut-off client's session (and the advisory locks it holds) outlives it."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline_project.common.postgres import SERVER_KEEPALIVES

REPO = Path(__file__).resolve().parents[2]


def _bound_s(settings: dict[str, int]) -> float:
    """When the server gives up on a silent peer: idle, then every probe unanswered; data unacknowledged: the user
    timeout."""
    probes = settings["tcp_keepalives_idle"] + settings["tcp_keepalives_interval"] * settings["tcp_keepalives_count"]
    return max(probes, settings["tcp_user_timeout"] / 1000)


def test_the_bound_is_under_a_minute():
    assert _bound_s(SERVER_KEEPALIVES) <= 60


def test_the_kubernetes_postgres_sets_the_same_keepalives():
    docs = list(yaml.safe_load_all((REPO / "deploy" / "k8s" / "base" / "postgres.yaml").read_text()))
    [statefulset] = [d for d in docs if d and d.get("kind") == "StatefulSet"]
    [container] = statefulset["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    given = dict(a.split("=", 1) for a in args[1::2])
    assert args[0::2] == ["-c"] * len(given)
    assert {k: int(v) for k, v in given.items()} == SERVER_KEEPALIVES


def test_the_stacks_postgres_runs_with_them(local_stack):
    import psycopg2

    conn = psycopg2.connect(local_stack.settings().postgres_url)
    try:
        with conn.cursor() as cur:
            shown = {}
            for name in SERVER_KEEPALIVES:
                cur.execute(f"SHOW {name}")
                shown[name] = cur.fetchone()[0]
    finally:
        conn.close()
    # on a TCP session SHOW reads the values off the socket, unitless (PostgreSQL's show hooks for these four)
    assert shown == {name: str(value) for name, value in SERVER_KEEPALIVES.items()}
