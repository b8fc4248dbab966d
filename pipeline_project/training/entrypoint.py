"""The out-of-process trainer: `python -m pipeline_project.training.entrypoint --config job.json`.

Also runs under `torchrun` (one process per GPU; gloo on CPU). The CLI contract, which
`resources/trainer.py` and the tests rely on:

- `--config` is a `JobConfig` JSON file (`pipeline_project.training.job`); secrets come from the
  environment, never from the file;
- the invocation itself is `run.run_job` (resume, train, checkpoint, MLflow, dagster-pipes report);
- rank 0 writes the `TrainJobResult` JSON to `--result` (or the config's `result_path`) and prints it
  as the last stdout line, prefixed by `TRAIN_RESULT `;
- exit code 0 also when there was nothing new to train on (status "nothing_new"); an error exits non-zero.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeline_project.settings import DistEnv
from pipeline_project.training import distributed
from pipeline_project.training.job import JobConfig, TrainJobResult
from pipeline_project.training.run import run_job

RESULT_PREFIX = "TRAIN_RESULT "


def _publish(result: TrainJobResult, result_path: str | None) -> None:
    payload = result.model_dump_json()
    if result_path:
        Path(result_path).write_text(payload)
    print(RESULT_PREFIX + payload, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job config JSON (JobConfig)")
    parser.add_argument("--result", help="where to write the result JSON (default: the config's result_path)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    job = JobConfig.model_validate_json(Path(args.config).read_text())
    try:
        result = run_job(job)
        if DistEnv.from_env().rank == 0:
            _publish(result, args.result or job.result_path)
    finally:
        distributed.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
