"""How long a PostgreSQL client waits on a server it cannot reach: libpq's connection parameters, in one place.

A network partition does not reset a TCP connection: without these a connect waits out the kernel's SYN retries
(about 2 minutes) and a query sent on an open connection waits for the retransmissions to give up (about 15
minutes), or forever when it waits for an answer the server will never send (the server restarted meanwhile).
With them a connect fails after `connect_timeout`, data unacknowledged for `tcp_user_timeout` fails the query,
and keepalives find a silent peer while the client waits; the caller's retry (an asset's RetryPolicy, a run
retry, dagster-postgres' own) then decides. A long query is not cut short: the server's kernel answers the probes.
"""

from __future__ import annotations

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
