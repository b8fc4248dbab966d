"""PostgreSQL clients of the project: how long one waits on a server it cannot reach (libpq's connection
parameters, in one place), and one connection confined to a schema of its own.

A network partition does not reset a TCP connection: without these a connect waits out the kernel's SYN retries
(about 2 minutes) and a query sent on an open connection waits for the retransmissions to give up (about 15
minutes), or forever when it waits for an answer the server will never send (the server restarted meanwhile).
With them a connect fails after `connect_timeout`, data unacknowledged for `tcp_user_timeout` fails the query,
and keepalives find a silent peer while the client waits; the caller's retry (an asset's RetryPolicy, a run
retry, dagster-postgres' own) then decides. A long query is not cut short: the server's kernel answers the probes.

`SchemaConnection` serves the small stores that share the stack's server (the ledger index, the metric totals):
each names its schema, its DDL and the error it raises when the server does not answer or fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CONNECT_TIMEOUT_S = 10
# keepalives: first probe after 10 s idle, then every 5 s, give up after 2 unanswered (about 20 s)
LIBPQ_TIMEOUTS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 2,
    "tcp_user_timeout": 20_000,  # ms
}


# The server's side of the same bound, set by the project on every PostgreSQL it runs (the local stack,
# deploy/k8s/base/postgres.yaml): a client host that dies or is cut off leaves a backend that holds its session's
# advisory locks (a dedup attempt, a batch) until the server notices; with these it does within about 25 s
# (idle 10 s, then 3 probes 5 s apart), and data it sends unacknowledged fails after 20 s, instead of the kernel's
# 2 h 11 min. Test: pipeline_project_tests/stack/test_postgres_liveness.py.
SERVER_KEEPALIVES: dict[str, int] = {
    "tcp_keepalives_idle": 10,
    "tcp_keepalives_interval": 5,
    "tcp_keepalives_count": 3,
    "tcp_user_timeout": 20_000,  # ms
}


def connect_kwargs(connect_timeout_s: int = CONNECT_TIMEOUT_S) -> dict[str, int]:
    """Keyword arguments for `psycopg2.connect(url, ...)` (they override the URL's own values)."""
    return {"connect_timeout": connect_timeout_s, **LIBPQ_TIMEOUTS}


def with_timeouts(url: str, connect_timeout_s: int = CONNECT_TIMEOUT_S) -> str:
    """`url` (postgresql[+driver]://...) with the parameters it does not set already, for clients that take a URL
    only (SQLAlchemy, dagster-postgres: psycopg2 hands query parameters to libpq)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    for key, value in connect_kwargs(connect_timeout_s).items():
        query.setdefault(key, str(value))
    return urlunsplit(parts._replace(query=urlencode(query)))


class SchemaConnection:
    def __init__(self, url: str, schema: str, ddl: str, *, what: str, error: type[Exception], connect_timeout_s: int):
        if not schema.replace("_", "").isalnum():
            raise ValueError(f"{what} schema {schema!r}: letters, digits and _ only")
        self.url, self.schema, self.ddl, self.what, self.error = url, schema, ddl, what, error
        self.connect_timeout_s = connect_timeout_s
        self._conn = None

    def connect(self):
        import psycopg2

        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg2.connect(
                    self.url, options=f"-c search_path={self.schema}", **connect_kwargs(self.connect_timeout_s)
                )
                with self._conn, self._conn.cursor() as cur:  # stores started at once create the schema once
                    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"pipeline_project.{self.what}",))
                    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                    cur.execute(self.ddl)
            except psycopg2.Error as exc:
                self.close()
                raise self.error(f"{self.what} database unreachable: {first_line(exc)}") from None
        return self._conn

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator:
        """A cursor in one transaction (committed at the end, rolled back on error), holding advisory lock
        `lock` until then when given."""
        import psycopg2

        conn = self.connect()
        try:
            with conn, conn.cursor() as cur:
                if lock is not None:
                    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"pipeline_project.{lock}",))
                yield cur
        except psycopg2.Error as exc:
            self.close()
            raise self.error(f"{self.what} database failed: {first_line(exc)}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
