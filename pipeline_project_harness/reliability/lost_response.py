"""A lost response, injected into a real boto3 client: the request reaches the real S3 server and is applied there,
then its answer is dropped as a cut connection drops it, so botocore retries the same request.

    with LoseResponses(s3, "PutObject", key_suffix="/latest.json", count=1) as lost:
        s3.put_object(...)   # attempt 1 applied, answer lost; attempt 2 answered
    lost.applied  # the statuses the server gave the attempts whose answers were lost

`LoseResponses(None, ...)` starts with no client: `attach(client)` adds each client code under test makes (an
asset's `S3Resource.get_client()`), and they share the count.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session


class LoseResponses:
    """Drop the answers of the first `count` `operation` requests whose key ends with `key_suffix`."""

    def __init__(self, s3, operation: str, *, key_suffix: str = "", count: int = 1) -> None:
        self._event = f"before-send.s3.{operation}"
        self._suffix, self._count = key_suffix, count
        self._session = URLLib3Session()
        self._clients = [s3] if s3 is not None else []
        self._open = False
        self.applied: list[int] = []  # server status of each request whose answer was dropped
        self.attempts = 0  # matching requests botocore sent, the dropped ones included

    def __enter__(self) -> LoseResponses:
        self._open = True
        for client in self._clients:
            client.meta.events.register_first(self._event, self._send_then_drop)
        return self

    def __exit__(self, *exc) -> None:
        self._open = False
        for client in self._clients:
            client.meta.events.unregister(self._event, self._send_then_drop)
        self._session.close()

    def attach(self, client):
        """Lose the answers of `client` too (while the block is open); returns it."""
        self._clients.append(client)
        if self._open:
            client.meta.events.register_first(self._event, self._send_then_drop)
        return client

    def _send_then_drop(self, request, **_kwargs):
        if not unquote(urlsplit(request.url).path).endswith(self._suffix):
            return None
        self.attempts += 1
        if len(self.applied) >= self._count:
            return None  # botocore sends this attempt itself
        response = self._session.send(request)  # the real server receives and applies the request
        self.applied.append(response.status_code)
        raise ConnectionClosedError(endpoint_url=request.url)  # ...and its answer never arrives
