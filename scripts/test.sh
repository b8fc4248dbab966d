#!/usr/bin/env bash
# The README's test command: set up, lint, then run the whole suite. The pytest session fixture
# reuses a running local stack or starts one (3 Kafka brokers, S3, MLflow) and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "==> ruff check + ruff format --check"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
