"""Faults of the Dagster deployment on the throw-away stack: the real webserver + daemon (`Stack.up(["dagster"])`,
its own DAGSTER_HOME and PostgreSQL storage), the real definitions, the real `raw_s3_sensor`.

* `run_worker_kill`: SIGKILL a run's worker process tree (the run worker and its step processes) while its
  `token_blocks` step runs. The run must leave STARTED (the code server that launched the worker sees it die),
  run retries must launch it again, and the retry must succeed; the batch is in the topic exactly once.
* `daemon_kill_mid_run`: SIGKILL the daemon's whole tree (daemon, its code server, the run worker it launched)
  while a run is executing and objects keep arriving; restart the daemon after a sensor interval. Every object
  must land in exactly one batch with one run, and run monitoring must fail the orphaned run so that run retries
  relaunch it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from pipeline_project.stack import Stack
from pipeline_project.streaming.ledger.records import read_ledger
from pipeline_project.streaming.produce.verify import verify_produced
from pipeline_project_harness.reliability.faults import kafka_of, restart, sigkill
from pipeline_project_harness.reliability.invariants import read_committed
from pipeline_project_harness.reliability.trials import TrialResult

SENSOR = "raw_s3_sensor"


def start_dagster(stack: Stack) -> None:
    """The webserver + daemon of the throw-away stack, on its own PostgreSQL."""
    stack.up(["dagster"], timeout=300)


def dagster_instance(stack: Stack):
    import dagster as dg

    return dg.DagsterInstance.from_config(str(stack.services["dagster"].home))


def upload_wave(stack: Stack, *, seed: int, files: int = 2, pause_s: float = 0.0) -> list[str]:
    """`files` objects of the generated sample under `raw/<ns clock>-<id>/` (the prefix the deployed sensor lists).
    Keys grow with time, as an append-only layout's do, so the sensor's cheap append listing finds them."""
    from pipeline_project.demo.sample.corpus import generate

    settings = stack.settings()
    s3 = settings.s3_client()
    prefix = f"{settings.raw_prefix}{time.time_ns()}-{uuid.uuid4().hex[:6]}/"
    keys = []
    for f in generate(seed=seed, docs_per_language=1)[:files]:
        key = prefix + f.key.removeprefix("raw/sample/")
        s3.put_object(Bucket=settings.bucket, Key=key, Body=f.data)
        keys.append(key)
        time.sleep(pause_s)
    return keys


def registered_batches(stack: Stack, instance) -> dict[str, list[str]]:
    """Every batch partition the sensor registered, with the keys its manifest lists."""
    from pipeline_project.defs.partitions import batches
    from pipeline_project.ingest.manifest import read_manifest

    settings = stack.settings()
    s3 = settings.s3_client()
    return {
        b: [o.key for o in read_manifest(s3, settings.bucket, b).objects]
        for b in instance.get_dynamic_partitions(batches.name)
    }


def sensor_runs(instance, batch: str | None = None) -> list:
    """Runs the sensor requested (not retries), oldest first; of one batch when given."""
    import dagster as dg

    records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR}), ascending=True)
    return [
        r.dagster_run
        for r in records
        if "dagster/parent_run_id" not in r.dagster_run.tags
        and (batch is None or r.dagster_run.tags.get("pipeline/batch") == batch)
    ]


def wait_for(what: str, check, timeout: float, interval: float = 0.5, story=None):
    """Poll `check()` until it is truthy; on timeout raise TimeoutError with `story()` (what the run did)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:g}s" + (f"\n{story()}" if story is not None else ""))


def run_story(instance, run_id: str, last: int = 25) -> str:
    """A run's status and its last events, one line each (for failure messages)."""
    run = instance.get_run_by_id(run_id)
    lines = [f"run {run_id}: {run.status.value if run else 'missing'}"]
    for e in list(instance.all_logs(run_id))[-last:]:
        kind = e.dagster_event.event_type_value if e.dagster_event is not None else "LOG"
        lines.append(f"  {kind} {e.step_key or ''} {(e.message or '').strip()[:200]}")
    return "\n".join(lines)


def batch_of(stack: Stack, instance, keys: list[str], timeout: float = 180.0) -> str:
    def find():
        for b, listed in registered_batches(stack, instance).items():
            if set(keys) <= set(listed):
                return b
        return None

    return wait_for(f"a batch holding {keys}", find, timeout)


def run_of(instance, batch: str, timeout: float = 120.0):
    return wait_for(f"the sensor's run of {batch}", lambda: (sensor_runs(instance, batch) or [None])[0], timeout)


def worker_pid(instance, run_id: str) -> int | None:
    for entry in instance.all_logs(run_id):
        message = entry.message or ""
        if "Started process for run (pid:" in message:
            return int(message.split("pid:")[1].strip(" ).\n"))
    return None


def step_started(instance, run_id: str, step: str) -> bool:
    return any(
        e.dagster_event is not None and e.dagster_event.event_type_value == "STEP_START" and e.step_key == step
        for e in instance.all_logs(run_id)
    )


def status_of(instance, run_id: str):
    return instance.get_run_by_id(run_id).status


def retry_of(instance, run_id: str):
    import dagster as dg

    records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/parent_run_id": run_id}))
    return records[0].dagster_run if records else None


def wait_run_done(instance, run_id: str, timeout: float) -> Any:
    return wait_for(f"run {run_id} to finish", lambda: instance.get_run_by_id(run_id).is_finished, timeout, 1.0)


def kill_tree(pid: int) -> list[int]:
    proc = psutil.Process(pid)
    victims = [proc, *proc.children(recursive=True)]
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(victims, timeout=15)
    return [p.pid for p in victims]


def batch_exactly_once(stack: Stack, batch: str) -> dict[str, Any]:
    """The ledger's record of `batch` and what read_committed readers see of it: every message with the batch's
    source inside the recorded ranges, as many blocks as recorded, and the ranges readable (verify_produced)."""
    kafka = kafka_of(stack)
    topic = stack.settings().topic
    report = read_ledger(kafka, topic).get(batch)
    if report is None:
        return {"ok": False, "problem": f"no ledger record for {batch}"}
    verify_produced(kafka, report)
    mine = [m for m in read_committed(kafka, topic) if m.source == batch]
    outside = [
        f"{m.partition}@{m.offset}"
        for m in mine
        if not (report.offsets.get(m.partition, (1, 0))[0] <= m.offset <= report.offsets.get(m.partition, (1, 0))[1])
    ]
    blocks = sum(len(m.seqs) for m in mine)
    return {
        "ok": not outside and blocks == report.blocks and len(mine) == report.messages,
        "claimed": report.blocks,
        "found": blocks,
        "messages": len(mine),
        "outside_claim": outside,
    }


def run_worker_kill(stack: Stack, instance, *, delay_s: float, step: str = "token_blocks", seed: int = 21):
    t_start = time.monotonic()
    keys = upload_wave(stack, seed=seed)
    batch = batch_of(stack, instance, keys)
    run = run_of(instance, batch)
    wait_for(f"step {step} of run {run.run_id} to start", lambda: step_started(instance, run.run_id, step), 300,
             story=lambda: run_story(instance, run.run_id))  # fmt: skip
    pid = worker_pid(instance, run.run_id)
    time.sleep(delay_s)
    still_running = not instance.get_run_by_id(run.run_id).is_finished
    killed = kill_tree(pid)
    t_kill = time.monotonic()
    wait_for(f"run {run.run_id} to leave STARTED", lambda: instance.get_run_by_id(run.run_id).is_finished, 120)
    detect_s = time.monotonic() - t_kill
    failed = status_of(instance, run.run_id).value
    retry = wait_for(f"a retry of {run.run_id}", lambda: retry_of(instance, run.run_id), 120)
    wait_run_done(instance, retry.run_id, 600)
    retry_status = status_of(instance, retry.run_id).value
    recovered_s = time.monotonic() - t_kill
    once = batch_exactly_once(stack, batch) if retry_status == "SUCCESS" else {"ok": False}
    ok = still_running and failed == "FAILURE" and retry_status == "SUCCESS" and once["ok"]
    return TrialResult(
        kind="dagster_run_worker_kill", timing_s=delay_s, victim=f"run worker tree ({len(killed)} processes)",
        blocks_claimed=once.get("claimed"), blocks_found=once.get("found", 0),
        lost=max(0, (once.get("claimed") or 0) - once.get("found", 0)),
        duplicated=max(0, once.get("found", 0) - (once.get("claimed") or 0)), recovery_s=recovered_s, ok=ok,
        attempts=2, seconds=time.monotonic() - t_start,
        detail={"batch": batch, "run": run.run_id, "killed_during_run": still_running, "run_status": failed,
                "left_started_after_s": detect_s, "retry": retry.run_id, "retry_status": retry_status,
                "exactly_once": once},
    )  # fmt: skip


def daemon_log_has(stack: Stack, text: str) -> bool:
    log = Path(stack.services["dagster"].dir) / "daemon.log"
    try:
        return text in log.read_text(errors="replace")
    except FileNotFoundError:
        return False


def daemon_kill_mid_run(stack: Stack, instance, *, down_s: float = 20.0, seed: int = 31, monitor_timeout: float = 150):
    """Kill the daemon tree while a run executes; objects arrive before the kill, while it is down and after it is
    back. Returns the trial and the sensor's bookkeeping: keys -> batches that list them, batches -> sensor runs."""
    t_start = time.monotonic()
    before = upload_wave(stack, seed=seed)
    batch = batch_of(stack, instance, before)
    run = run_of(instance, batch)

    def started() -> bool:
        return bool(worker_pid(instance, run.run_id)) and status_of(instance, run.run_id).value == "STARTED"

    wait_for(f"run {run.run_id} to start", started, 300, story=lambda: run_story(instance, run.run_id))
    killed = sigkill(stack, "dagster-daemon", tree=True)
    t_kill = time.monotonic()
    during = upload_wave(stack, seed=seed + 1) + upload_wave(stack, seed=seed + 2, files=1)
    time.sleep(down_s)
    restart_s = restart(stack, "dagster")
    after = upload_wave(stack, seed=seed + 3)
    keys = before + during + after

    def all_batched():
        found = registered_batches(stack, instance)
        return found if set(keys) <= {k for v in found.values() for k in v} else None

    listed = wait_for("every object in a batch", all_batched, 240)
    in_batches = Counter(k for v in listed.values() for k in v if k in set(keys))
    ours = {b for b, v in listed.items() if set(v) & set(keys)}
    # the tick adds the partition, then submits its run: give the last tick a moment to do both
    with contextlib.suppress(TimeoutError):
        wait_for("a sensor run per batch", lambda: all(sensor_runs(instance, b) for b in ours), 60)
    runs = {b: len(sensor_runs(instance, b)) for b in ours}
    sensor_ok = all(in_batches[k] == 1 for k in keys) and all(n == 1 for n in runs.values())

    # Run monitoring polls every `poll_interval_seconds`; stop waiting early when the daemon has already logged
    # that it cannot check this run, instead of waiting out the whole bound.
    monitor_error = f"Hit error while monitoring run {run.run_id}"

    def settled():
        if instance.get_run_by_id(run.run_id).is_finished:
            return "finished"
        if daemon_log_has(stack, monitor_error):
            return "monitoring error"
        return None

    left_started = None
    try:
        if wait_for(f"run {run.run_id} to leave STARTED", settled, monitor_timeout, 1.0) == "finished":
            left_started = time.monotonic() - t_kill
    except TimeoutError:
        pass
    retry = None
    if left_started is not None:  # the retry daemon launches the retry on its next poll of the failure event
        with contextlib.suppress(TimeoutError):
            retry = wait_for(f"a retry of {run.run_id}", lambda: retry_of(instance, run.run_id), 120)
    retry_status = None
    if retry is not None:
        wait_run_done(instance, retry.run_id, 600)
        retry_status = status_of(instance, retry.run_id).value
    once = batch_exactly_once(stack, batch) if retry_status == "SUCCESS" else {"ok": False}
    return TrialResult(
        kind="dagster_daemon_kill", timing_s=down_s, victim=f"daemon tree (pid {killed})",
        blocks_claimed=len(keys), blocks_found=sum(1 for k in keys if in_batches[k] == 1),
        lost=sum(1 for k in keys if in_batches[k] == 0), duplicated=sum(1 for k in keys if in_batches[k] > 1),
        recovery_s=left_started, ok=sensor_ok and retry_status == "SUCCESS" and once["ok"], attempts=2,
        seconds=time.monotonic() - t_start,
        detail={"sensor_ok": sensor_ok, "objects": len(keys), "batches": sorted(ours), "sensor_runs": runs,
                "run": run.run_id, "run_status": status_of(instance, run.run_id).value,
                "left_started_after_s": left_started, "retry_status": retry_status, "exactly_once": once,
                "daemon_restart_s": restart_s, "story": run_story(instance, run.run_id, last=12),
                "monitoring_error_in_log": daemon_log_has(stack, monitor_error)},
    )  # fmt: skip
