"""The out-of-process trainer: `python -m pipeline_project.training.entrypoint --config job.json`.

Also runs under `torchrun` (one process per GPU; gloo on CPU). The CLI contract, which
`resources/trainer.py` and the tests rely on:

- the job is a `JobConfig` JSON (`pipeline_project.training.job`): a file (`--config job.json`), or the
  value of an environment variable (`--config-env PIPELINE_TRAINER_JOB`), which is how the launchers
  (`resources/launchers.py`) hand it over, so a pod needs no file from the run worker. Secrets come from
  the environment, never from the job. The per-batch part may travel by reference (`backlog_uri`, see
  `training/backlog.py`): rank 0 reads it from S3 before training;
- `--print-config` validates the job, prints it as JSON and exits, without training or touching a service;
- the invocation itself is `run.run_job` (resume, train, checkpoint, MLflow, dagster-pipes report);
- rank 0 writes the `TrainJobResult` JSON to `--result` (or the config's `result_path`) and prints it
  as the last stdout line, prefixed by `TRAIN_RESULT `;
- exit code 0 also when there was nothing new to train on (status "nothing_new"); an error exits non-zero;
  a job that asks for CUDA (`device: cuda`, or `--require-cuda`, which every launch that requests GPUs passes)
  where torch cannot use it (`devices.resolve_device`) prints one line saying why to
  stderr and exits 3.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from pipeline_project.settings import DistEnv
from pipeline_project.training import backlog
from pipeline_project.training.job import JobConfig, TrainJobResult

RESULT_PREFIX = "TRAIN_RESULT "
NO_CUDA_EXIT = 3


def _publish(result: TrainJobResult, result_path: str | None) -> None:
    payload = result.model_dump_json()
    if result_path:
        Path(result_path).write_text(payload)
    print(RESULT_PREFIX + payload, flush=True)


def _job_json(path: str | None, env_name: str | None) -> str:
    """The job's JSON: the file's text, or the variable's value. The job is this CLI's input, not a setting;
    the variable's name comes from the command line, so the launcher decides where the job travels."""
    if path is not None:
        return Path(path).read_text()
    value = os.environ.get(env_name or "")
    if not value:
        raise SystemExit(f"--config-env {env_name}: the variable is not set or empty")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="job config JSON file (JobConfig)")
    source.add_argument("--config-env", metavar="NAME", help="environment variable holding the job config JSON")
    parser.add_argument("--result", help="where to write the result JSON (default: the config's result_path)")
    parser.add_argument("--print-config", action="store_true", help="validate the job, print it as JSON, exit")
    parser.add_argument(
        "--require-cuda",
        action="store_true",
        help="train on CUDA or refuse to start (every launch that requests GPUs passes it): sets the job's device",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    job = JobConfig.model_validate_json(_job_json(args.config, args.config_env))
    if args.require_cuda:
        job = job.model_copy(update={"train": job.train.model_copy(update={"device": "cuda"})})
    if args.print_config:
        print(job.model_dump_json(), flush=True)
        return 0
    if DistEnv.from_env().rank == 0:  # the only rank that uses the per-batch fields reads them, once
        job = backlog.resolved(job, job.settings().s3_client())
    # torch only now: a bad or missing job fails in a second, not after the seconds torch takes to import
    from pipeline_project.training import distributed
    from pipeline_project.training.errors import CudaUnavailableError
    from pipeline_project.training.run import run_job

    try:
        result = run_job(job)
        if DistEnv.from_env().rank == 0:
            _publish(result, args.result or job.result_path)
    except CudaUnavailableError as exc:
        print(f"trainer: {exc}", file=sys.stderr, flush=True)
        return NO_CUDA_EXIT
    finally:
        distributed.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
