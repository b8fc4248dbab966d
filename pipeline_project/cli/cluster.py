"""`pipeline-project cluster ...`: hosts as network namespaces on this machine (docs/cluster.md)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pipeline_project.cli.errors import fail
from pipeline_project.cluster.cluster import Cluster
from pipeline_project.cluster.topology import ClusterSpec
from pipeline_project.stack.errors import StackError

cluster_app = typer.Typer(
    help="A cluster of hosts on this machine: network namespaces on a private bridge (root only; docs/cluster.md).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

console = Console() if sys.stdout.isatty() else Console(width=160)

HostArg = Annotated[str, typer.Argument(help="broker-1..3, s3, postgres, mlflow, dagster, trainer-1, trainer-2")]


@cluster_app.callback()
def _options(
    ctx: typer.Context,
    root: Annotated[
        Path | None,
        typer.Option("--dir", envvar="PIPELINE_CLUSTER_DIR", help="The cluster's state root [default <repo>/.cluster]"),
    ] = None,
    prefix: Annotated[
        str, typer.Option(envvar="PIPELINE_CLUSTER_PREFIX", help="Prefix of its namespaces and links")
    ] = ClusterSpec.prefix,
    subnet: Annotated[str, typer.Option(envvar="PIPELINE_CLUSTER_SUBNET", help="Its private /24")] = ClusterSpec.subnet,
) -> None:
    """Which cluster the command acts on: two with other dirs, prefixes and subnets can run side by side."""
    try:
        spec = ClusterSpec(prefix=prefix, subnet=subnet, **({"root": root} if root is not None else {}))
    except StackError as err:
        raise fail(err) from None
    ctx.obj = Cluster(spec)


@cluster_app.command()
def up(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for health")] = 180.0,
) -> None:
    """Create the network and hosts, start every service that is not running, wait until all are healthy."""
    started = time.monotonic()
    try:
        launched = ctx.obj.up(timeout=timeout, progress=console.log)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    console.log(f"cluster up: {len(launched)} process(es) started in {time.monotonic() - started:.0f} s")


@cluster_app.command()
def down(
    ctx: typer.Context,
    wipe: Annotated[bool, typer.Option("--wipe", help="Also delete every host's data")] = False,
) -> None:
    """Stop every service, kill what is left, delete namespaces, links and bridge."""
    try:
        cluster: Cluster = ctx.obj
        cluster.down(wipe=wipe, progress=console.log)
        left = cluster.leftovers()
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    if left:
        raise fail(StackError(f"left behind: {', '.join(left)}"))


@cluster_app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Each host, its address, its link and the health of its services; exit code 1 if any is not healthy."""
    try:
        hosts = ctx.obj.status()
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    if as_json:
        typer.echo(json.dumps([h.to_dict() for h in hosts], indent=2))
    else:
        table = Table(title="pipeline-project cluster")
        for column in ("host", "address", "link", "procs", "service", "health", "url", "detail"):
            table.add_column(column, no_wrap=column != "detail", overflow="fold")
        for h in hosts:
            link = {"up": "[green]up[/green]", "cut": "[yellow]cut[/yellow]"}.get(h.link, f"[red]{h.link}[/red]")
            rows = [
                (s.name, "[green]healthy[/green]" if s.healthy else "[red]down[/red]", s.url, s.detail)
                for s in h.services
            ] or [("-", "", "", "")]
            for i, row in enumerate(rows):
                first = (h.name, h.address, link, str(h.processes)) if i == 0 else ("", "", "", "")
                table.add_row(*first, *row)
        console.print(table)
    if not all(h.healthy for h in hosts):
        raise typer.Exit(1)


@cluster_app.command()
def cut(ctx: typer.Context, host: HostArg) -> None:
    """Unplug the host's cable (a network partition); its processes keep running."""
    try:
        ctx.obj.cut(host)
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    console.log(f"{host}: link down")


@cluster_app.command()
def heal(ctx: typer.Context, host: HostArg) -> None:
    """Plug the host's cable back in."""
    try:
        ctx.obj.heal(host)
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    console.log(f"{host}: link up")


@cluster_app.command()
def kill(ctx: typer.Context, host: HostArg) -> None:
    """SIGKILL every process of the host (`up` starts its services again)."""
    try:
        pids = ctx.obj.kill(host)
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    console.log(f"{host}: killed {len(pids)} process(es)")


@cluster_app.command()
def logs(
    ctx: typer.Context,
    host: HostArg,
    lines: Annotated[int, typer.Option("-n", "--lines", help="Lines per log")] = 50,
) -> None:
    """Print the end of the logs of the host's service."""
    try:
        tails = ctx.obj.logs(host, lines)
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    for name, tail in tails.items():
        console.rule(name)
        typer.echo("\n".join(tail))


@cluster_app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_cmd(ctx: typer.Context, host: HostArg) -> None:
    """Run a command on a host with the cluster's settings in its environment: `cluster exec trainer-1 -- CMD`."""
    argv = list(ctx.args)
    if not argv:
        raise fail(StackError("no command given: `pipeline-project cluster exec HOST -- CMD ARGS`"))
    try:
        result = ctx.obj.exec(host, argv)
    except Exception as err:  # noqa: BLE001
        raise fail(err) from None
    # a command killed by a signal exits as a shell reports it: 128 + the signal's number
    raise typer.Exit(result.returncode if result.returncode >= 0 else 128 - result.returncode)
