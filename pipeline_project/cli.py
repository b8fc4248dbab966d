"""`pipeline-project` command line. `stack` manages the embedded local services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeline_project.stack import SERVICES, Stack, StackConfig, StackError, parse_services, tool_command
from pipeline_project.stack.config import DEFAULT_SERVICES

app = typer.Typer(
    help="Dagster ML data platform: raw text -> cleaned shards -> Kafka token blocks -> DeepSeek checkpoint.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
stack_app = typer.Typer(
    help="The embedded local stack: 3-broker Kafka (KRaft), s3proxy, MLflow, Dagster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(stack_app, name="stack")

# Aliases whose tool takes --bootstrap-server: the stack's brokers are filled in when the caller gives none.
BOOTSTRAP_TOOLS = {
    "topics",
    "console-consumer",
    "console-producer",
    "metadata-quorum",
    "broker-api-versions",
    "consumer-perf-test",
    "get-offsets",
    "configs",
}

# Piped output (CI logs) gets a wide table instead of rich's 80-column fallback.
console = Console() if sys.stdout.isatty() else Console(width=160)
err_console = Console(stderr=True)

StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="State directory [env PIPELINE_STATE_DIR, default <repo>/.state]")
]
ServicesOpt = Annotated[str | None, typer.Option("--services", help=f"Comma-separated subset of {','.join(SERVICES)}")]


def _fail(err: Exception) -> typer.Exit:
    message = str(err) if isinstance(err, StackError) else f"{type(err).__name__}: {err}"
    lines = message.strip().splitlines() or [type(err).__name__]
    err_console.print(Text.assemble(("error: ", "red"), lines[0]), highlight=False, soft_wrap=True)
    return typer.Exit(1)


def _stack(state_dir: Path | None, **ports) -> Stack:
    overrides = {k: v for k, v in ports.items() if v is not None}
    if state_dir is not None:
        overrides["state_dir"] = state_dir
    return Stack(StackConfig(**overrides))


def _ports(kafka_ports: str | None) -> tuple[int, ...] | None:
    if kafka_ports is None:
        return None
    try:
        return tuple(int(p) for p in kafka_ports.split(","))
    except ValueError:
        raise StackError(f"--kafka-ports {kafka_ports!r} is not a comma-separated list of ports") from None


@stack_app.command()
def up(
    services: ServicesOpt = None,
    with_dagster: Annotated[
        bool, typer.Option("--with-dagster", help="Also start dagster-webserver and dagster-daemon")
    ] = False,
    state_dir: StateDir = None,
    kafka_ports: Annotated[str | None, typer.Option(help="Broker ports, e.g. 19092,19093,19094")] = None,
    s3_port: Annotated[int | None, typer.Option(help="s3proxy port")] = None,
    mlflow_port: Annotated[int | None, typer.Option(help="MLflow port")] = None,
    dagster_port: Annotated[int | None, typer.Option(help="Dagster webserver port")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for health")] = 180.0,
) -> None:
    """Start the services that are not running and wait until all are healthy (idempotent)."""
    try:
        default = (*DEFAULT_SERVICES, "dagster") if with_dagster else DEFAULT_SERVICES
        names = parse_services(services, default)
        if with_dagster and "dagster" not in names:
            names.append("dagster")
        stack = _stack(
            state_dir,
            kafka_ports=_ports(kafka_ports),
            s3_port=s3_port,
            mlflow_port=mlflow_port,
            dagster_port=dagster_port,
        )
        started_at = time.monotonic()
        with console.status("starting the stack...") as spinner:

            def progress(msg: str) -> None:
                console.log(msg)
                spinner.update(msg)

            try:
                stack.up(names, timeout=timeout, progress=progress)
            except KeyboardInterrupt:
                raise StackError("interrupted; the processes this `up` launched were stopped") from None
        console.log(f"stack up in {time.monotonic() - started_at:.1f}s (state: {stack.state_dir})")
        _print_status(stack.status(names))
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None


@stack_app.command()
def down(
    services: ServicesOpt = None,
    wipe: Annotated[bool, typer.Option("--wipe", help="Also delete the services' data")] = False,
    state_dir: StateDir = None,
) -> None:
    """Stop the processes the stack started (by pid file); data is kept unless --wipe."""
    try:
        stack = _stack(state_dir)
        names = parse_services(services, SERVICES)
        stopped = stack.down(names, wipe=wipe, progress=console.log)
        console.log(f"stopped {len(stopped)} process(es)" + (", data wiped" if wipe else ""))
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None


def _print_status(statuses) -> None:
    table = Table(title="pipeline-project stack")
    table.add_column("process", no_wrap=True)
    table.add_column("health", no_wrap=True)
    table.add_column("url", no_wrap=True)
    table.add_column("pid", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for s in statuses:
        health = "[green]healthy[/green]" if s.healthy else "[red]down[/red]"
        pid = str(s.pid) if s.pid else ("external" if s.healthy else "-")
        table.add_row(s.name, health, s.url, pid, s.detail)
    console.print(table)


@stack_app.command()
def status(
    services: ServicesOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    state_dir: StateDir = None,
) -> None:
    """Health and URL of each service; exit code 1 if any is down."""
    try:
        stack = _stack(state_dir)
        default = SERVICES if any(mp.is_running() for mp in stack.processes(["dagster"])) else DEFAULT_SERVICES
        statuses = stack.status(parse_services(services, default))
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    if as_json:
        typer.echo(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        _print_status(statuses)
    if not all(s.healthy for s in statuses):
        raise typer.Exit(1)


@stack_app.command()
def logs(
    name: Annotated[
        str, typer.Argument(help="Service (kafka, s3, mlflow, dagster) or process (kafka-2, dagster-daemon)")
    ],
    lines: Annotated[int, typer.Option("-n", "--lines", help="Lines per log")] = 50,
    state_dir: StateDir = None,
) -> None:
    """Print the end of a service's log(s)."""
    try:
        stack = _stack(state_dir)
        tails = stack.logs(name, lines)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    for proc_name, tail in tails.items():
        if len(tails) > 1:
            console.rule(proc_name)
        for line in tail:
            typer.echo(line)


@stack_app.command(
    "kafka-tool",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def kafka_tool_cmd(
    ctx: typer.Context,
    tool: Annotated[
        str,
        typer.Argument(
            help="Class name or alias: topics, console-consumer, metadata-quorum, "
            "broker-api-versions, producer-perf-test, consumer-perf-test, ..."
        ),
    ],
) -> None:
    """Run one of Kafka's own tools from the stack's jars, e.g. `kafka-tool topics --list` (the stack's brokers are
    the default --bootstrap-server)."""
    args = list(ctx.args)
    if tool in BOOTSTRAP_TOOLS and not {"--bootstrap-server", "--bootstrap-controller"} & set(args):
        args = ["--bootstrap-server", Stack().settings().kafka_bootstrap, *args]
    try:
        cmd = tool_command(tool, *args)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    sys.stdout.flush()
    raise typer.Exit(subprocess.call(cmd, env=os.environ.copy()))


@app.command()
def demo(
    source: Annotated[
        Path | None, typer.Option("--source", help="Upload your own files from DIR instead of the generated sample")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each phase")] = 1800.0,
    train_steps: Annotated[int, typer.Option(help="Cap on training steps (0 = train on everything new)")] = 40,
    seed: Annotated[
        int | None,
        typer.Option(help="Seed of the generated sample (default: from the clock, so each demo adds new text)"),
    ] = None,
    state_dir: StateDir = None,
) -> None:
    """The main job: stack up (Dagster included), upload a corpus to S3, let the sensor ingest it, train, summarize."""
    from pipeline_project.demo.runner import run_demo

    if source is not None and not source.is_dir():
        raise _fail(StackError(f"--source {source} is not a directory"))
    try:
        stack = _stack(state_dir)
        with console.status("starting the stack (Kafka x3, S3, MLflow, Dagster)...") as spinner:

            def progress(msg: str) -> None:
                console.log(msg)
                spinner.update(msg)

            stack.up([*DEFAULT_SERVICES, "dagster"], timeout=300, progress=progress)
        _print_status(stack.status([*DEFAULT_SERVICES, "dagster"]))
        run_demo(source, timeout, stack, train_steps=train_steps, seed=seed)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None


if __name__ == "__main__":
    app()
