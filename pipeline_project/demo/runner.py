"""The main job in one command: stack up, upload a corpus, let the sensor pick it up, train, summarize."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from pipeline_project.demo.sample.corpus import SampleFile
from pipeline_project.demo.sample.deepseek import demo_sample
from pipeline_project.settings import Settings

console = Console()
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}
# The tag Dagster's sensor daemon writes on every run a sensor launches (`DagsterRun.tags_for_sensor`), also the
# UI's "launched by sensor" filter. Dagster exports no public constant for it (its own lives in a private module);
# pipeline_project_tests/test_demo_runner.py fails when the tag Dagster writes changes.
SENSOR_NAME_TAG = "dagster/sensor_name"


def files_from_dir(source: Path, prefix: str) -> list[SampleFile]:
    """Every file under `source`, keyed `prefix` + its relative path. A file reached through a symlink that
    leads out of `source`, or whose relative path is not a safe key (`ingest.key_components`), is refused."""
    from pipeline_project.common.s3 import UnsafeKeyError, key_components

    root = source.resolve()
    files = [p for p in sorted(source.rglob("*")) if p.is_file()]
    if not files:
        raise SystemExit(f"--source {source}: no files found")
    out = []
    for p in files:
        rel = p.relative_to(source).as_posix()
        if not p.resolve().is_relative_to(root):
            raise SystemExit(f"--source {source}: {rel} is a symlink to {p.resolve()}, outside the directory")
        try:
            key_components(rel)
        except UnsafeKeyError as err:
            raise SystemExit(f"--source {source}: {err}") from None
        out.append(SampleFile(f"{prefix}{rel}", p.read_bytes()))
    return out


def upload(settings: Settings, files: list[SampleFile]) -> None:
    s3 = settings.s3_client()
    columns = (*Progress.get_default_columns()[:-1], TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:  # bytes: rate in MB/s, ETA
        task = progress.add_task("uploading to S3", total=sum(len(f.data) for f in files))
        for f in files:
            s3.put_object(Bucket=settings.bucket, Key=f.key, Body=f.data)
            progress.advance(task, len(f.data))
    console.print(
        f"uploaded {len(files)} objects ({sum(len(f.data) for f in files) / 1e6:.2f} MB) "
        f"to s3://{settings.bucket}/{files[0].key.rsplit('/', 2)[0]}/…"
    )


def _runs_since(instance, started: float):
    from dagster import RunsFilter

    return instance.get_runs(filters=RunsFilter(created_after=datetime.fromtimestamp(started, timezone.utc)))


def wait_for_runs(
    instance, started: float, *, want: str, timeout_s: float, settle_s: float = 45.0, predicate=None
) -> list:
    """Wait until runs created since `started` that match `predicate` exist and have all finished,
    and no new one has appeared for `settle_s` (eager downstream runs may follow a sensor run)."""
    deadline = time.time() + timeout_s
    last_change, seen = time.time(), {}
    with console.status(f"waiting for {want}") as status:
        while time.time() < deadline:
            runs = [r for r in _runs_since(instance, started) if predicate is None or predicate(r)]
            state = {r.run_id: r.status.value for r in runs}
            if state != seen:
                seen, last_change = state, time.time()
                for r in runs:
                    console.log(
                        f"run {r.run_id[:8]} {r.job_name} {r.tags.get('dagster/partition', '')} {r.status.value}"
                    )
            done = runs and all(s in FINISHED for s in state.values())
            status.update(
                f"waiting for {want}: {len(runs)} runs, {sum(s in FINISHED for s in state.values())} finished"
            )
            if done and time.time() - last_change >= settle_s:
                return runs
            time.sleep(2)
    raise SystemExit(f"timed out after {timeout_s:.0f}s waiting for {want}; see the Dagster UI")


def _partitions_of(runs) -> list[str]:
    return sorted({r.tags["dagster/partition"] for r in runs if "dagster/partition" in r.tags})


def _meta(instance, asset, partition: str | None = None) -> dict:
    from pipeline_project.defs.partitions import latest_materialization_metadata

    return latest_materialization_metadata(instance, asset.key, partition)


def summarize(instance, settings: Settings, partitions: list[str], ckpt_meta: dict) -> Table:
    from pipeline_project.defs.assets.cleaned import cleaned_shards
    from pipeline_project.defs.assets.takedowns import takedown_requests
    from pipeline_project.defs.assets.token_blocks import token_blocks

    totals = {"documents in": 0, "kept": 0, "dropped": 0, "quarantined": 0, "blocks in Kafka": 0, "tokens in Kafka": 0}
    per_domain: dict[str, list[int]] = {}  # domain -> [kept documents, tokens], from token_blocks' per-domain counts
    for p in partitions:
        c = _meta(instance, cleaned_shards, p)
        k = _meta(instance, token_blocks, p)
        totals["documents in"] += int(c.get("documents_in", 0))
        totals["kept"] += int(c.get("kept", 0))
        totals["dropped"] += int(c.get("dropped", 0))
        totals["quarantined"] += int(c.get("quarantined", 0))
        totals["blocks in Kafka"] += int(k.get("blocks", 0))
        totals["tokens in Kafka"] += int(k.get("tokens", 0))
        for domain, counts in (k.get("domains") or {}).items():
            acc = per_domain.setdefault(domain, [0, 0])
            acc[0] += int(counts.get("docs", 0))
            acc[1] += int(counts.get("tokens", 0))
    table = Table(title="pipeline summary", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in totals.items():
        table.add_row(name, f"{value:,}")
    for domain, (docs, tokens) in sorted(per_domain.items()):
        table.add_row(f"kept {domain}", f"{docs:,} documents, {tokens:,} tokens")
    for label, value in corpus_rows([_meta(instance, token_blocks, p) for p in partitions]):
        table.add_row(label, value)
    table.add_row("batches", ", ".join(partitions))
    table.add_row("training steps", str(ckpt_meta.get("steps", "-")))
    table.add_row("retracted blocks passed over", str(ckpt_meta.get("retracted_blocks", 0)))
    table.add_row("takedown requests", str(len(instance.get_dynamic_partitions(takedown_requests.name))))
    for label, value in loss_rows(ckpt_meta):
        table.add_row(label, value)
    for label, key in [("checkpoint", "checkpoint_uri"), ("MLflow run", "mlflow_run_url")]:
        table.add_row(label, str(ckpt_meta.get(key, "-")))
    table.add_row("Dagster UI", settings.dagster_url)
    table.add_row("MLflow UI", settings.mlflow_tracking_uri)
    return table


def loss_rows(ckpt_meta: dict) -> list[tuple[str, str]]:
    """The training loss as the mean of the last steps and its change from the first ("-" when the run trained
    nothing or predates the summary), never one step's value alone."""
    from pipeline_project.training.loss_summary import describe_change, describe_loss, from_metrics

    summary = from_metrics(ckpt_meta)
    if summary is None:
        return [("training loss", "-"), ("loss change", "-")]
    return [("training loss", describe_loss(summary)), ("loss change", describe_change(summary))]


def corpus_rows(token_meta: list[dict]) -> list[tuple[str, str]]:
    """FIM and decontamination counts summed over the batches' token_blocks metadata ("off" where no batch has
    them: FIM off, decontamination not configured)."""
    fim = [int(m["fim_docs"]) for m in token_meta if "fim_docs" in m]
    decon = [m for m in token_meta if "decontaminated" in m]
    per_benchmark: dict[str, int] = {}
    for m in decon:
        for key, n in m.items():
            if key.startswith("decontaminated_"):
                name = key.removeprefix("decontaminated_")
                per_benchmark[name] = per_benchmark.get(name, 0) + int(n)
    detail = ", ".join(f"{b} {n:,}" for b, n in sorted(per_benchmark.items()))
    decon_total = sum(int(m["decontaminated"]) for m in decon)
    return [
        ("FIM documents", f"{sum(fim):,}" if fim else "off"),
        ("decontaminated", (f"{decon_total:,}" + (f" ({detail})" if detail else "")) if decon else "off"),
    ]


def triggered_runs_in_the_way(instance) -> list[str]:
    """The training runs the checkpoint trigger requested that are queued or running: the demo cancels them, so its
    own run never waits behind one (training runs one at a time). Their data is not lost: the trigger requests it
    again once the demo releases its hold."""
    from pipeline_project.defs.assets.checkpoint import IN_FLIGHT, training_runs
    from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor

    return [
        r.dagster_run.run_id
        for r in training_runs(instance, IN_FLIGHT)
        if r.dagster_run.tags.get(SENSOR_NAME_TAG) == checkpoint_trigger_sensor.name
    ]


def use_dagster_home(home: Path) -> None:
    """Point this process at the stack's Dagster instance: `DagsterInstance.get()` reads DAGSTER_HOME.

    This sets the variable (for this process and the children it starts); it reads no configuration.
    """
    os.environ["DAGSTER_HOME"] = str(home)


def _ingest_and_train(instance, settings: Settings, files, timeout_s: float, train_steps: int, stamp: str) -> list:
    """Upload, wait for the ingest runs, then train (preempting triggered runs) and wait; the batches ingested."""
    from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

    started = time.time()
    upload(settings, files)

    ingest = wait_for_runs(
        instance,
        started,
        want="the S3 sensor's ingest runs",
        timeout_s=timeout_s,
        predicate=lambda r: "dagster/partition" in r.tags,
    )
    failed = [r for r in ingest if r.status.value != "SUCCESS"]
    if failed:
        raise SystemExit(
            f"{len(failed)} ingest run(s) failed, e.g. {failed[0].run_id}; see {settings.dagster_url}/runs"
        )
    partitions = _partitions_of(ingest)

    train_started = time.time()
    client = DagsterGraphQLClient("127.0.0.1", port_number=int(settings.dagster_url.rsplit(":", 1)[-1]))
    for triggered in triggered_runs_in_the_way(instance):
        console.print(f"canceling triggered training run {triggered[:8]}: the demo trains now, the trigger later")
        try:
            client.terminate_run(triggered)
        except DagsterGraphQLClientError as err:  # it finished meanwhile: nothing to wait behind
            console.print(f"run {triggered[:8]} was not canceled: {err}")
    # the run's own bound (deepseek_checkpoint's config): the trainer resource keeps its configured values
    run_config = {"ops": {"deepseek_checkpoint": {"config": {"max_steps": train_steps}}}} if train_steps else None
    run_id = client.submit_job_execution("train_checkpoint", run_config=run_config, tags={"pipeline/demo": stamp})
    console.print(f"training: run {run_id[:8]} ({settings.dagster_url}/runs/{run_id})")
    train = wait_for_runs(
        instance,
        train_started,
        want="training",
        timeout_s=timeout_s,
        settle_s=0,
        predicate=lambda r: r.run_id == run_id,
    )
    if train[0].status.value != "SUCCESS":
        raise SystemExit(f"training run {run_id} failed; see {settings.dagster_url}/runs/{run_id}")
    return partitions


def run_demo(source: Path | None, timeout_s: float, stack, train_steps: int = 0, seed: int | None = None) -> None:
    from dagster import DagsterInstance

    from pipeline_project.defs.sensors.trigger_policy import hold_trigger, release_trigger
    from pipeline_project.demo.corpus_check import check_running_dagster

    settings: Settings = stack.settings()
    use_dagster_home(stack.services["dagster"].home)
    instance = DagsterInstance.get()

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    prefix = f"{settings.raw_prefix}demo-{stamp}/"
    files = (
        files_from_dir(source, prefix)
        if source
        else [
            SampleFile(prefix + f.key.removeprefix("raw/sample/"), f.data)
            for f in demo_sample(seed=int(stamp[-6:]) if seed is None else seed)
        ]
    )
    corpus, warning = check_running_dagster(settings.dagster_url)
    console.print(
        f"[yellow]warning:[/] {warning}" if warning else f"corpus settings of the stack's Dagster: {corpus.describe()}"
    )
    owner = f"demo {stamp}"
    # The trigger requests nothing while the demo holds it (a lease: a demo that dies leaves it to expire), so
    # the demo's corpus does not start a triggered run that the demo's own training would queue behind.
    hold_trigger(instance, owner, seconds=3 * timeout_s, now=time.time())
    try:
        partitions = _ingest_and_train(instance, settings, files, timeout_s, train_steps, stamp)
    finally:
        release_trigger(instance, owner)
    from pipeline_project.defs.assets.checkpoint import deepseek_checkpoint

    console.print(summarize(instance, settings, partitions, _meta(instance, deepseek_checkpoint)))
    if warning:
        console.print(f"[yellow]warning:[/] {warning}")
