"""One PostgreSQL connection confined to a schema of its own, which it creates on first use (plain Python).

For the small stores that share the stack's server (the ledger index, the metric totals): each names its
schema, its DDL and the error it raises when the server does not answer or fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pipeline_project.common.pg_timeouts import connect_kwargs


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
