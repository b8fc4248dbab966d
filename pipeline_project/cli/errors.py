"""The command line's one error printer: `error: <one line>` on stderr and exit status 1, never a traceback."""

from __future__ import annotations

import typer

from pipeline_project.common.errors import for_person


def fail(err: BaseException) -> typer.Exit:
    """Print `err` in one line; raise what this returns (`raise fail(err) from None`)."""
    typer.echo(f"error: {for_person(err)}", err=True)
    return typer.Exit(1)
