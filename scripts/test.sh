#!/usr/bin/env bash
# The README's test command: set up, lint, then run the whole suite (what CI runs). The pytest session fixture
# reuses a running local stack or starts one (3 Kafka brokers, S3, MLflow, PostgreSQL) and stops what it started.
#
# One tier alone (markers set in pipeline_project_tests/conftest.py):
#   --fast          no service, stand-ins and pure logic (about 4 minutes here; target 2); skips setup when .venv exists
#   --integration   tests against the real local stack
#   --fault         processes of throw-away stacks killed and cut (pipeline_project_tests/reliability)
#   --cluster       the network-namespace cluster (root; pipeline_project_tests/cluster)
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
case "${1:-}" in
  --fast) tier=(-m "not integration and not fault and not cluster"); shift ;;
  --integration) tier=(-m "integration and not fault and not cluster"); shift ;;
  --fault) tier=(-m fault); shift ;;
  --cluster) tier=(-m cluster); shift ;;
esac
if [ "${tier[*]:-}" != "-m not integration and not fault and not cluster" ] || [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
echo "==> ruff check + ruff format --check"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "${tier[@]}" "$@"
