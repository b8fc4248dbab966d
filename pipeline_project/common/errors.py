"""One line that says what went wrong, for a person: how every command and report describes an exception."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def describe(exc: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, at most `limit` characters."""
    return f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")[:limit]


def for_person(exc: BaseException) -> str:
    """The project's own errors (and ValueError) are written for a person: their message alone; any other
    exception also names its type."""
    text = first_line(exc)
    ours = type(exc).__module__.startswith("pipeline_project") or type(exc) is ValueError
    return text if ours and text else describe(exc)
