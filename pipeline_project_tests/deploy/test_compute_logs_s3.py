"""deploy/dagster/dagster.yaml's step logs, against the shared stack's real S3 server: an instance loaded from
that very file (storage swapped for sqlite) captures a step's stdout and the object lands in the bucket."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid

import yaml

from pipeline_project_tests.deploy.helpers import DEPLOY


def _default_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def test_the_deploy_instance_keeps_step_logs_in_s3(stack, tmp_path, monkeypatch):
    for name, value in {
        "PIPELINE_S3_BUCKET": stack.bucket,
        "PIPELINE_S3_ENDPOINT": stack.s3_endpoint,
        "AWS_REGION": stack.s3_region,
        "AWS_ACCESS_KEY_ID": stack.s3_access_key,
        "AWS_SECRET_ACCESS_KEY": stack.s3_secret_key,
    }.items():
        monkeypatch.setenv(name, value)
    config = yaml.safe_load((DEPLOY / "dagster" / "dagster.yaml").read_text())
    config["storage"] = {"sqlite": {"base_dir": str(tmp_path / "storage")}}
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    run_id = f"test-{uuid.uuid4().hex}"
    # captured in a process of its own, as a run worker captures a step: Dagster mirrors the step's output through
    # `tail -F` children and stops them with SIGTERM. A child inherits the blocked-signal mask and the ignored
    # signals of the process that forks it, and a long test session's worker can ignore SIGTERM: the tails never
    # stopped and the capture hung (reproduced by starting it with SIGTERM ignored). The child starts with
    # nothing blocked and SIGTERM and SIGINT at their defaults, as a run worker does.
    step = (
        "import sys, dagster as dg\n"
        f"instance = dg.DagsterInstance.from_config({str(tmp_path)!r})\n"
        f"with instance.compute_log_manager.capture_logs([{run_id!r}, 'compute_logs', 'step']):\n"
        "    print('a line of the step', flush=True)\n"
        "    sys.stdout.flush()\n"
        "instance.dispose()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", step],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_default_signals,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    try:
        prefix = f"{config['compute_logs']['config']['prefix']}/storage/{run_id}/"
        listed = stack.s3_client().list_objects_v2(Bucket=stack.bucket, Prefix=prefix).get("Contents", [])
        keys = [o["Key"] for o in listed]
        assert any(k.endswith(".out") for k in keys), keys
        out = next(k for k in keys if k.endswith(".out"))
        body = stack.s3_client().get_object(Bucket=stack.bucket, Key=out)["Body"].read().decode()
        assert "a line of the step" in body
    finally:
        for obj in (
            stack.s3_client().list_objects_v2(Bucket=stack.bucket, Prefix="dagster/compute-logs/").get("Contents", [])
        ):
            if run_id in obj["Key"]:
                stack.s3_client().delete_object(Bucket=stack.bucket, Key=obj["Key"])
