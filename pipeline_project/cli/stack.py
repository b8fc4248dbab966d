"""`pipeline-project stack ...`: start, inspect and stop the embedded local stack, and run Kafka's own tools."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pipeline_project.cli.errors import fail
from pipeline_project.stack import SERVICES, Stack, StackConfig, StackError, parse_services, tool_command
from pipeline_project.stack.config import DEFAULT_SERVICES, default_state_dir
from pipeline_project.stack.security import CLIENT_USER

stack_app = typer.Typer(
    help="The embedded local stack: 3-broker Kafka (KRaft), s3proxy, MLflow, Dagster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

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
# How each of them takes a client config file (the secure profile's login); the rest use --command-config.
CLIENT_CONFIG_OPTION = {
    "console-consumer": "--consumer.config",
    "console-producer": "--producer.config",
    "consumer-perf-test": "--consumer.config",
}

# Piped output (CI logs) gets a wide table instead of rich's 80-column fallback.
console = Console() if sys.stdout.isatty() else Console(width=160)

StateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="State directory [env PIPELINE_STATE_DIR, default <repo>/.state]")
]
ServicesOpt = Annotated[str | None, typer.Option("--services", help=f"Comma-separated subset of {','.join(SERVICES)}")]


def make_stack(state_dir: Path | None, **ports) -> Stack:
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
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Kafka's client listener is SASL_SSL (SCRAM users, the project's own CA) "
            "[env PIPELINE_KAFKA_SECURITY=sasl_ssl; a state dir keeps the profile it was formatted with]",
        ),
    ] = False,
    sasl_mechanism: Annotated[
        str | None,
        typer.Option(help="Mechanism clients are told to use: SCRAM-SHA-512 (default), SCRAM-SHA-256, PLAIN"),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for health")] = 180.0,
) -> None:
    """Start the services that are not running and wait until all are healthy (idempotent)."""
    try:
        default = (*DEFAULT_SERVICES, "dagster") if with_dagster else DEFAULT_SERVICES
        names = parse_services(services, default)
        if with_dagster and "dagster" not in names:
            names.append("dagster")
        stack = make_stack(
            state_dir,
            kafka_ports=_ports(kafka_ports),
            s3_port=s3_port,
            mlflow_port=mlflow_port,
            dagster_port=dagster_port,
            kafka_security="sasl_ssl" if secure else None,
            kafka_sasl_mechanism=sasl_mechanism,
        )
        _start(stack, names, timeout)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None


def _start(stack: Stack, names: list[str], timeout: float) -> None:
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
    print_status(stack.status(names))
    if "kafka" in names and stack.config.kafka_secure is not None:
        _print_kafka_env(stack)


def _print_kafka_env(stack: Stack) -> None:
    env_cmd = "pipeline-project stack env"
    if stack.state_dir != default_state_dir():
        env_cmd += f" --state-dir {shlex.quote(str(stack.state_dir))}"
    console.print(f'Kafka clients of the SASL_SSL listener need (or run `eval "$({env_cmd})"`):', highlight=False)
    kafka_env = {k: v for k, v in _env_lines(stack.config).items() if k.startswith("KAFKA_")}
    console.print("\n".join(kafka_env.values()), highlight=False, soft_wrap=True)


def _env_lines(config: StackConfig) -> dict[str, str]:
    """Shell lines that point a client at the stack; the Kafka password is read from its file, never printed."""
    secure = config.kafka_secure
    lines = {}
    for name, value in config.client_env().items():
        if name == "KAFKA_SASL_PASSWORD" and secure is not None:
            lines[name] = f'export {name}="$(cat {shlex.quote(str(secure.password_file(CLIENT_USER)))})"'
        elif value:
            lines[name] = f"export {name}={shlex.quote(value)}"
        else:
            lines[name] = f"unset {name}"
    return lines


@stack_app.command()
def env(state_dir: StateDir = None) -> None:
    """Print the exports that point a shell's clients (dagster dev, scripts) at the stack:
    `eval "$(pipeline-project stack env)"`."""
    try:
        lines = _env_lines(make_stack(state_dir).config)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    typer.echo("\n".join(lines.values()))


@stack_app.command()
def down(
    services: ServicesOpt = None,
    wipe: Annotated[bool, typer.Option("--wipe", help="Also delete the services' data")] = False,
    state_dir: StateDir = None,
) -> None:
    """Stop the processes the stack started (by pid file); data is kept unless --wipe."""
    try:
        stack = make_stack(state_dir)
        names = parse_services(services, SERVICES)
        stopped = stack.down(names, wipe=wipe, progress=console.log)
        console.log(f"stopped {len(stopped)} process(es)" + (", data wiped" if wipe else ""))
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None


def print_status(statuses) -> None:
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
        stack = make_stack(state_dir)
        # the default services, plus each on-demand one (dagster, prometheus) that has a process running
        default = [n for n in SERVICES if n in DEFAULT_SERVICES or any(mp.is_running() for mp in stack.processes([n]))]
        statuses = stack.status(parse_services(services, default))
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    if as_json:
        typer.echo(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        print_status(statuses)
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
        stack = make_stack(state_dir)
        tails = stack.logs(name, lines)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
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
    the default --bootstrap-server; with the secure profile the tool logs in as the stack's client user)."""
    args = list(ctx.args)
    try:
        stack = Stack()
        if tool in BOOTSTRAP_TOOLS and not {"--bootstrap-server", "--bootstrap-controller"} & set(args):
            args = ["--bootstrap-server", stack.settings().kafka_bootstrap, *args]
            option = CLIENT_CONFIG_OPTION.get(tool, "--command-config")
            secure = stack.config.kafka_secure
            if secure is not None and option not in args:
                args = [option, str(secure.client_properties), *args]  # logged in as the stack's client user
        cmd = tool_command(tool, *args)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    sys.stdout.flush()
    raise typer.Exit(subprocess.call(cmd, env=os.environ.copy()))
