"""`pipeline-project` command line. `stack` manages the embedded local services."""

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
from rich.text import Text

from pipeline_project.batches_cli import batches_app
from pipeline_project.cluster.cli import cluster_app
from pipeline_project.ledger_cli import ledger_app
from pipeline_project.stack import SERVICES, Stack, StackConfig, StackError, parse_services, tool_command
from pipeline_project.stack.config import DEFAULT_SERVICES, default_state_dir
from pipeline_project.stack.kafka_security import CLIENT_USER

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
app.add_typer(cluster_app, name="cluster")
app.add_typer(batches_app, name="batches")
app.add_typer(ledger_app, name="ledger")

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
        stack = _stack(
            state_dir,
            kafka_ports=_ports(kafka_ports),
            s3_port=s3_port,
            mlflow_port=mlflow_port,
            dagster_port=dagster_port,
            kafka_security="sasl_ssl" if secure else None,
            kafka_sasl_mechanism=sasl_mechanism,
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
        if "kafka" in names and stack.config.kafka_secure is not None:
            env_cmd = "pipeline-project stack env"
            if stack.state_dir != default_state_dir():
                env_cmd += f" --state-dir {shlex.quote(str(stack.state_dir))}"
            console.print(
                f'Kafka clients of the SASL_SSL listener need (or run `eval "$({env_cmd})"`):', highlight=False
            )
            kafka_env = {k: v for k, v in _env_lines(stack.config).items() if k.startswith("KAFKA_")}
            console.print("\n".join(kafka_env.values()), highlight=False, soft_wrap=True)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None


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
        lines = _env_lines(_stack(state_dir).config)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    typer.echo("\n".join(lines.values()))


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
        # the default services, plus each on-demand one (dagster, prometheus) that has a process running
        default = [n for n in SERVICES if n in DEFAULT_SERVICES or any(mp.is_running() for mp in stack.processes([n]))]
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


@app.command("bad-input")
def bad_input(
    directory: Annotated[Path, typer.Argument(help="Empty (or new) directory to write the files and expected.json to")],
    scale: Annotated[
        str,
        typer.Option(help="small: every class, caps scaled down (seconds); full: 200 MB line, 1M docs, 8 GiB bombs"),
    ] = "small",
    seed: Annotated[int, typer.Option(help="Seed of the generated content")] = 0,
) -> None:
    """Write malformed input in every class the readers quarantine or repair, with expected.json; then run
    `./scripts/demo.sh --source DIR` (full scale) and compare its "documents in" with expected records."""
    from rich.progress import Progress

    from pipeline_project.demo.bad_input import SCALES, write_bad_input

    if scale not in SCALES:
        raise _fail(StackError(f"--scale {scale!r}: choose one of {', '.join(SCALES)}"))
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise _fail(StackError(f"{directory} exists and is not an empty directory"))
    written = {"bytes": 0}
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"writing {scale}-scale bad input", total=None)

        def progress(cls, f, size):
            written["bytes"] += size
            bar.update(task, advance=1, description=f"{cls.name}: {f.path}")

        try:
            expected = write_bad_input(directory, scale=scale, seed=seed, progress=progress)
        except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
            raise _fail(err) from None
    table = Table(title=f"bad input ({scale}) in {directory}")
    table.add_column("class", no_wrap=True)
    table.add_column("outcome at the readers", no_wrap=True)
    table.add_column("files", justify="right")
    files_per_class: dict[str, int] = {}
    for entry in expected["files"].values():
        files_per_class[entry["class"]] = files_per_class.get(entry["class"], 0) + 1
    for name, cls in expected["classes"].items():
        table.add_row(name, cls["outcome"], str(files_per_class.get(name, 0)))
    console.print(table)
    totals = expected["totals"]
    console.print(
        f"{totals['objects']} objects, {written['bytes'] / 1e6:,.1f} MB; the readers must yield {totals['records']:,} "
        f"records: {totals['kept']:,} documents, {sum(totals['quarantined'].values()):,} quarantined"
        + ("" if scale == "full" else f" (read with reader overrides {expected['reader']})")
    )


@app.command()
def doctor(
    only: Annotated[
        str | None, typer.Option("--only", help="Comma-separated subset of kafka,s3,mlflow,dagster,postgres")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each service may take to answer")] = 5.0,
) -> None:
    """Check Kafka, S3, MLflow, Dagster and PostgreSQL: one line per check with a fix hint; exit 1 if any fails."""
    from pipeline_project.doctor import main as doctor_main

    raise typer.Exit(doctor_main(only, timeout, echo=typer.echo))


@app.command("dedup-import")
def dedup_import(
    key: Annotated[str, typer.Option("--key", help="The S3 index file of earlier versions")] = "dedup/index.bin",
    schema: Annotated[str, typer.Option("--schema", help="PostgreSQL schema of the dedup index")] = "dedup",
) -> None:
    """Migrate the S3 dedup index file (`s3://$PIPELINE_S3_BUCKET/dedup/index.bin`) into the PostgreSQL index."""
    from pipeline_project.cleaning import DedupIndex
    from pipeline_project.cleaning.dedup_store import PostgresDedupIndex
    from pipeline_project.settings import Settings

    try:
        settings = Settings()
        data = settings.s3_client().get_object(Bucket=settings.bucket, Key=key)["Body"].read()
        old = DedupIndex.from_bytes(data)
        index = PostgresDedupIndex(settings.postgres_url, num_perm=old.num_perm, num_bands=old.num_bands, schema=schema)
        imported = index.import_index(old)
        index.close()
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    console.print(f"imported {imported:,} documents of {len(old.batches)} batches into schema {schema!r}")


if __name__ == "__main__":
    app()
