#!/usr/bin/env bash
# The README's main command: set up, start the stack with Dagster, upload a sample corpus to S3,
# let the sensor pick it up, materialize the whole graph and print a summary.
# Pass --source DIR to upload your own files instead of the generated sample.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pipeline-project demo "$@"
