"""Kill trials against a throw-away stack, counted by sequence numbers and content hashes; and the bad-input classes.

    .venv/bin/python bench/reliability.py [--trials 2] [--kinds producer,loader,process,trainer,s3,mlflow]
                                          [--kinds ...,dagster,latest_json] [--no-bad-input] [--merge]

Starts its own stack (3 Kafka brokers with RF 3 / min ISR 2, S3, PostgreSQL, MLflow; Dagster webserver + daemon
for the `dagster` kind) on free ports under a temp dir, runs `--trials` trials of each kind with the timings
cycling through the kind's list, and stops and wipes the stack. The shared stack on the default ports is never
touched. Each trial is one function of `pipeline_project_harness/reliability/` (the fault tests run the same ones):

| kind | fault | counted |
|---|---|---|
| producer | `kill -9` a broker (transaction coordinator or busiest leader) during produce_blocks; restart it | sequence blocks read back with read_committed |
| loader | `kill -9` the busiest leader while a bounded loader consumes; restart it 2 s later | delivered (partition, offset, block) vs an undisturbed run |
| process | `kill -9` the producing process inside a transaction; retry the ledger key in a new process | sequence blocks read back |
| trainer | `kill -9` the trainer after its first mid-run checkpoint; run it again | batches trained per checkpoint lineage |
| s3 | `kill -9` the S3 server while cleaned_shards runs; restart it after N s | published documents (sha256) vs an undisturbed run |
| mlflow | `kill -9` the MLflow server (and workers) at the trainer's start / mid-run | the checkpoint in S3 and latest.json |
| dagster | `kill -9` a run worker tree mid token_blocks; the daemon tree mid-run while objects arrive | objects per batch, blocks per batch |
| overwrite | objects overwritten 0-3 s after the sensor took them (some twice); sensor ticks until idle | versions per manifest entry, by content sha256 |
| dedup | `kill -9` cleaned_shards between two of its stores (index, sink, manifest, cleanup); clean an overlapping batch; abandon the first | published documents (sha256) vs an undisturbed run |
| cluster_pg_cleaning, cluster_pg_run | the PostgreSQL host of a namespace cluster cut 30 s while the deployment's run is in cleaned_shards / token_blocks | published documents (sha256) vs an undisturbed cleaning; pending dedup attempts; blocks per batch |
| cluster_daemon | `kill -9` the daemon tree on the cluster's dagster host mid-run while objects arrive | objects per batch, blocks per batch |
| cluster_broker_produce, cluster_broker_loader | a broker host of a namespace cluster (prefix ppk) cut 30 s while two batches are produced / while the bounded loader feeds training | sequence blocks read back with read_committed / delivered (partition, offset, block) and digest vs an undisturbed run |
| lost_manifest | the answers to batch 1's manifest PUT lost: one (retried), all five (botocore raises after it was applied); an overlapping batch 2 cleaned after it | published documents (sha256) vs an undisturbed run; objects each manifest names; pending attempts |
| cluster_cleaner_host | the cleaning host of a namespace cluster cut in the reserve -> publish window: dead (killed behind the cut) or back after 60 s; an overlapping batch cleaned meanwhile | published documents (sha256) vs an undisturbed run; pending attempts; batch 2's time from the cut |
| latest_json | the answer to the conditional PUT of latest.json is lost (applied, retried, 412); once with a rival | files (sha256) of the checkpoint latest.json names vs what its writer saved; unreferenced folders |

Writes bench/results/reliability.json and prints a table with the load average. Goal: 0 lost, 0 duplicated.
`--merge` keeps the trials of the kinds this run did not run from the file it writes (the summary counts them all).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline_project.stack import Stack  # noqa: E402
from pipeline_project_harness.cluster import broker_faults, dead_cleaner, dedup_shards, pg_faults  # noqa: E402
from pipeline_project_harness.reliability import (  # noqa: E402
    dedup_trials,
    outages,
    publish_trials,
    training_trials,
    trials,
)
from pipeline_project_harness.reliability.faults import (  # noqa: E402
    ensure_transaction_state,
    kafka_of,
    restart,
    throwaway_config,
    wait_fully_replicated,
)
from pipeline_project_harness.reliability.stacks import (  # noqa: E402
    BASE_SERVICES,
    ROOT_PREFIXES,
    claim,
    reap_orphaned_stacks,
    stop_leftovers,
    teardown_on_sigterm,
)

RESULTS = REPO / "bench" / "results" / "reliability.json"
KINDS = ("producer", "loader", "process", "trainer", "s3", "mlflow", "dagster", "latest_json", "dedup", "overwrite",
         "lost_manifest")  # fmt: skip
# each on a namespace cluster of its own, not the throw-away stack
CLUSTER_KINDS = pg_faults.KINDS + broker_faults.KINDS + (dead_cleaner.KIND, dedup_shards.KIND)
KINDS += CLUSTER_KINDS
DEFAULT_KINDS = ("producer", "loader", "process", "trainer", "s3", "mlflow", "latest_json", "dedup", "lost_manifest")

# The timings each kind cycles through (trial i takes entry i mod len).
PRODUCER = [(0.2, "coordinator", False), (1.0, "leader", True), (3.0, "coordinator", True), (0.5, "leader", False)]
LOADER = [0.2, 1.5, 3.0]
PROCESS = [(0.3, False), (2.0, True), (1.0, True), (3.5, False)]
TRAINER = [0.0, 1.0, 2.5]
S3 = [(0.0, 15.0), (2.0, 6.0), (1.0, 30.0)]
MLFLOW = ["mid_run", "start"]
OVERWRITE = [0.0, 1.0, 3.0]  # seconds between the tick that took the objects and their overwrite
DEDUP = list(dedup_trials.KILL_POINTS)


def healthy(stack: Stack) -> None:
    if not stack.is_healthy(BASE_SERVICES):
        for service in BASE_SERVICES:
            restart(stack, service)
    wait_fully_replicated(kafka_of(stack), len(stack.config.kafka_ports))


def run_kind(kind: str, stack: Stack, n: int, work: Path, state: dict) -> list[dict]:
    rows = []
    for i in range(n):
        if kind not in CLUSTER_KINDS:
            healthy(stack)
        load_before = os.getloadavg()[0]
        try:
            row = run_trial(kind, stack, i, work, state).to_dict()
        except Exception as exc:  # noqa: BLE001 - a trial that could not run is a row too, not a crash
            row = {"kind": kind, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500],
                   "traceback": traceback.format_exc()[-2000:]}  # fmt: skip
        row["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        rows.append(row)
        print(f"  {kind} #{i + 1}: {'ok' if row.get('ok') else 'NOT OK'} "
              f"lost={row.get('lost')} duplicated={row.get('duplicated')} {row.get('error', '')[:120]}", flush=True)  # fmt: skip
    return rows


def run_trial(kind: str, stack: Stack, i: int, work: Path, state: dict):
    """Trial `i` of `kind` (its timings cycle through the kind's list); `state` carries what trials share."""
    if kind in _TRIALS:
        return _TRIALS[kind](stack, i, work, state)
    if kind == dead_cleaner.KIND:
        return dead_cleaner.cleaner_host_lost(
            pg_faults.bench_cluster(state), variant=dead_cleaner.VARIANTS[i % len(dead_cleaner.VARIANTS)], seed=61 + i
        )
    if kind == dedup_shards.KIND:
        return dedup_shards.trial(pg_faults.bench_cluster(state).cluster, i)
    if kind in broker_faults.KINDS:
        return broker_faults.bench_trial(kind, i, state)
    if kind in CLUSTER_KINDS:
        return pg_faults.bench_trial(kind, i, state)
    return dagster_trial(stack, i, state)


def _producer_trial(stack: Stack, i: int, work: Path, state: dict):
    delay, victim, bounded = PRODUCER[i % len(PRODUCER)]
    return trials.broker_kill_while_producing(stack, delay_s=delay, victim=victim, bounded=bounded)


def _loader_trial(stack: Stack, i: int, work: Path, state: dict):
    if "seeded" not in state:
        state["seeded"] = trials.seed_loader_topic(stack, n_blocks=3000)
    return trials.broker_kill_while_consuming(stack, state["seeded"], delay_s=LOADER[i % len(LOADER)])


def _process_trial(stack: Stack, i: int, work: Path, state: dict):
    delay, bounded = PROCESS[i % len(PROCESS)]
    return trials.producer_process_kill(stack, delay_s=delay, bounded=bounded)


def _trainer_trial(stack: Stack, i: int, work: Path, state: dict):
    return training_trials.trainer_kill(stack, work, delay_s=TRAINER[i % len(TRAINER)])


def _s3_trial(stack: Stack, i: int, work: Path, state: dict):
    if "reference" not in state:
        state["reference"] = outages.reference_cleaning(stack, 11)
    kill_after, outage = S3[i % len(S3)]
    return outages.s3_outage_during_cleaning(
        stack, state["reference"], seed=11, kill_after_s=kill_after, outage_s=outage
    )


def _mlflow_trial(stack: Stack, i: int, work: Path, state: dict):
    return outages.mlflow_down_during_training(stack, work, when=MLFLOW[i % len(MLFLOW)])


def _dedup_trial(stack: Stack, i: int, work: Path, state: dict):
    database = outages.fresh_database(stack, f"dedup_kill_{i}_{int(time.time())}")
    return dedup_trials.index_commit_kill(stack.settings(), database, kill_at=DEDUP[i % len(DEDUP)])


def _overwrite_trial(stack: Stack, i: int, work: Path, state: dict):
    from pipeline_project_harness.reliability.overwrite_trials import overwrite_after_take

    return overwrite_after_take(stack, delay_s=OVERWRITE[i % len(OVERWRITE)], seed=i)


def _lost_manifest_trial(stack: Stack, i: int, work: Path, state: dict):
    database = outages.fresh_database(stack, f"lost_manifest_{i}_{int(time.time())}")
    lost = publish_trials.LOST[i % len(publish_trials.LOST)]
    return publish_trials.lost_manifest_answers(stack.settings(), database, lost=lost, seed=43 + i)


def _latest_json_trial(stack: Stack, i: int, work: Path, state: dict):
    return latest_json_trial(stack, i, work)


_TRIALS = {
    "producer": _producer_trial,
    "loader": _loader_trial,
    "process": _process_trial,
    "trainer": _trainer_trial,
    "s3": _s3_trial,
    "mlflow": _mlflow_trial,
    "dedup": _dedup_trial,
    "overwrite": _overwrite_trial,
    "latest_json": _latest_json_trial,
    "lost_manifest": _lost_manifest_trial,
}


def latest_json_trial(stack: Stack, i: int, work: Path):
    """Scenario i (cycling) of `checkpoint_trials`: a lost answer to the latest.json write, or a rival winning."""
    from pipeline_project_harness.reliability import checkpoint_trials

    scenario = checkpoint_trials.SCENARIOS[i % len(checkpoint_trials.SCENARIOS)]
    return checkpoint_trials.lost_latest_answer(stack.settings(), scenario=scenario, seed=i, work=work)


def merge_previous(result: dict, previous: dict) -> dict:
    """`result` plus the trials of `previous` (an earlier run's file) whose kind this run did not produce."""
    ran = {r.get("kind") for r in result["trials"]}
    kept = [r for r in previous.get("trials", []) if r.get("kind") not in ran]
    trials = kept + result["trials"]
    earlier = {k: previous.get(k) for k in ("command", "started_at", "wall_s", "load_avg")}
    return {**result, "trials": trials, "bad_input": result["bad_input"] or previous.get("bad_input", []),
            "merged_from": [*previous.get("merged_from", []), {**earlier, "trials_kept": len(kept)}]}  # fmt: skip


def summarize(rows: list[dict], bad: list[dict]) -> dict:
    trial_rows = [r for r in rows if "kind" in r]
    return {
        "trials": len(trial_rows),
        "ok": sum(1 for r in trial_rows if r.get("ok")),
        "lost": sum(r.get("lost") or 0 for r in trial_rows),
        "duplicated": sum(r.get("duplicated") or 0 for r in trial_rows),
        "bad_input_classes": len(bad),
        "bad_input_matching": sum(1 for b in bad if b["match"]),
    }


def dagster_trial(stack: Stack, i: int, state: dict):
    from pipeline_project_harness.reliability import dagster_faults

    if "instance" not in state:
        dagster_faults.start_dagster(stack)
        state["instance"] = dagster_faults.dagster_instance(stack)
    instance = state["instance"]
    if i % 2 == 0:
        return dagster_faults.run_worker_kill(stack, instance, delay_s=0.5 + i, seed=21 + i)
    return dagster_faults.daemon_kill_mid_run(stack, instance, down_s=20.0, seed=31 + i)


def bad_input_classes(work: Path) -> list[dict]:
    """Every class of `pipeline_project.demo.bad_input.write` (small scale), read by the readers: the reasons it got."""
    try:
        from pipeline_project.demo.bad_input.write import EXPECTED_NAME, write_bad_input
    except ImportError:
        return []
    from pipeline_project.cleaning import CleaningConfig, Quarantined, read_object
    from pipeline_project.cleaning.config import ReaderConfig

    root = work / "bad-input"
    write_bad_input(root, "small")
    expected = json.loads((root / EXPECTED_NAME).read_text())
    config = CleaningConfig(reader=ReaderConfig(**expected["reader"]))
    got: dict[str, Counter] = {name: Counter() for name in expected["classes"]}
    for rel, entry in expected["files"].items():
        for item in read_object(f"raw/bad/{rel}", (root / rel).read_bytes(), config):
            got[entry["class"]]["kept" if not isinstance(item, Quarantined) else item.reason] += 1
    rows = []
    for name, cls in sorted(expected["classes"].items()):
        reasons = dict(got[name])
        outcome = cls["outcome"]
        match = (set(reasons) - {"kept"} == {outcome}) if outcome != "kept" else set(reasons) == {"kept"}
        rows.append({"class": name, "expected": outcome, "got": reasons, "match": match,
                     "description": cls.get("description", "")})  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    head = "| kind | timing s | victim | claimed | found | lost | duplicated | recovery s | attempts | ok | load 1m |"
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        rec = r.get("recovery_s")
        lines.append(
            f"| {r.get('kind')} | {r.get('timing_s', '')} | {r.get('victim', '')} | {r.get('blocks_claimed')} | "
            f"{r.get('blocks_found')} | {r.get('lost')} | {r.get('duplicated')} | "
            f"{'' if rec is None else f'{rec:.1f}'} | {r.get('attempts', '')} | {'yes' if r.get('ok') else 'NO'} | "
            f"{r['load_avg_1m'][0]}→{r['load_avg_1m'][1]} |"
        )
    return "\n".join(lines)


def run_all(stack: Stack, kinds: list[str], args, root: Path, rows: list[dict], state: dict):
    """Start the stack, run every kind's trials into `rows`, read the bad-input classes; always tear down."""
    try:
        t0 = time.monotonic()
        if set(kinds) - set(CLUSTER_KINDS):
            stack.up(BASE_SERVICES, timeout=300)
            ensure_transaction_state(kafka_of(stack))
        stack_up_s = time.monotonic() - t0
        print(f"throw-away stack up in {stack_up_s:.0f}s under {root}", flush=True)
        for kind in kinds:
            print(f"{kind}: {args.trials} trial(s)", flush=True)
            rows += run_kind(kind, stack, args.trials, root, state)
        bad = [] if args.no_bad_input else bad_input_classes(root)
        return stack_up_s, bad
    finally:
        if "instance" in state:
            state["instance"].dispose()
        pg_faults.bench_close(state)
        broker_faults.bench_close(state)
        stack.down(wipe=True)
        stop_leftovers(stack.state_dir, dagster_only=False)
        shutil.rmtree(root, ignore_errors=True)


def print_report(result: dict, summary: dict, trial_rows: list[dict], bad: list[dict], out: Path) -> None:
    """The trials' table, the bad-input classes' table and the one-line summary (`summary`: this run's)."""
    print()
    print(table(trial_rows))
    if bad:
        print()
        print("| bad-input class | expected | got | match |")
        print("|---|---|---|---|")
        for b in bad:
            got = ", ".join(f"{k} {v}" for k, v in sorted(b["got"].items()))
            print(f"| {b['class']} | {b['expected']} | {got} | {'yes' if b['match'] else 'NO'} |")
    la = result["load_avg"]
    print(f"\n{summary['ok']}/{summary['trials']} trials ok, {summary['lost']} lost, {summary['duplicated']} duplicated; "
          f"bad input {summary['bad_input_matching']}/{summary['bad_input_classes']} classes as expected; "
          f"load average {la['start'][0]} -> {la['end'][0]} (1 min), {os.cpu_count()} CPUs; {result['wall_s']:.0f}s; "
          f"-> {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2, help="trials of each kind (default 2)")
    parser.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--no-bad-input", action="store_true", help="skip the bad-input classes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--merge", action="store_true", help="keep --out's trials of kinds this run does not run")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {', '.join(KINDS)}")

    started = time.time()
    reaped = reap_orphaned_stacks()
    if reaped:
        print(f"stopped throw-away stacks left by dead sessions: {', '.join(reaped)}")
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIXES[1]))
    root.chmod(0o755)  # PostgreSQL runs as the postgres user and must reach its data dir
    claim(root)
    stack = Stack(throwaway_config(root / "state"))
    rows: list[dict] = []
    state: dict = {}
    load_start = os.getloadavg()
    with teardown_on_sigterm():
        stack_up_s, bad = run_all(stack, kinds, args, root, rows, state)

    trial_rows = [r for r in rows if "kind" in r]
    summary = summarize(rows, bad)
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_avg": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]},
        "stack_up_s": round(stack_up_s, 1),
        "summary": summary,
        "trials": rows,
        "bad_input": bad,
    }
    if args.merge and args.out.exists():
        result = merge_previous(result, json.loads(args.out.read_text()))
        result["summary"] = summarize(result["trials"], result["bad_input"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))

    print_report(result, summary, trial_rows, bad, args.out)
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
