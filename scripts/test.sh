#!/usr/bin/env bash
# The README's test command: set up, lint, then run the whole suite (what CI runs). The pytest session fixture
# reuses a running local stack or starts one (3 Kafka brokers, S3, MLflow, PostgreSQL) and stops what it started.
#
# One tier alone (markers set in pipeline_project_tests/conftest.py):
#   --fast          no service, stand-ins and pure logic, on every core (pytest-xdist; PYTEST_WORKERS=N to choose);
#                   skips setup when .venv exists. 1 min 34 s of pytest here on 2026-12-06, load under 1
#   --integration   tests against the real local stack
#   --fault         processes of throw-away stacks killed and cut (pipeline_project_tests/reliability)
#   --cluster       the network-namespace cluster (root; pipeline_project_tests/cluster)
# Other arguments go to pytest.
#
# With no tier flag (CI), the cluster tier runs beside the rest, in a second pytest session: its tests mostly wait
# on cut links and restarts, and it shares nothing with the others (its own namespaces, addresses and state). Its
# output is printed when both are done. The rest is two sessions in turn: the fast tier on every core, then the
# integration and fault tiers one test at a time (they share the local stack). The script fails if any session does.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
case "${1:-}" in
  --fast) tier=(-m "not integration and not fault and not cluster" -n "${PYTEST_WORKERS:-auto}"); shift ;;
  --integration) tier=(-m "integration and not fault and not cluster"); shift ;;
  --fault) tier=(-m fault); shift ;;
  --cluster) tier=(-m cluster); shift ;;
esac
if [ "${tier[1]:-}" != "not integration and not fault and not cluster" ] || [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
echo "==> ruff check + ruff format --check"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
if [ ${#tier[@]} -gt 0 ]; then
  exec .venv/bin/python -m pytest "${tier[@]}" "$@"
fi
log=$(mktemp -t cluster-tier.XXXXXX.log)
.venv/bin/python -m pytest -m cluster -p no:cacheprovider --basetemp "$(mktemp -d -t pytest-cluster.XXXXXX)" "$@" \
  >"$log" 2>&1 &
cluster_pid=$!
trap 'kill "$cluster_pid" 2>/dev/null || true' EXIT
# The rest: the fast tier on every core first, then the tests that share the one local stack, one at a time.
fast=0
.venv/bin/python -m pytest -m "not integration and not fault and not cluster" -n "${PYTEST_WORKERS:-auto}" "$@" || fast=$?
rest=0
.venv/bin/python -m pytest -m "(integration or fault) and not cluster" "$@" || rest=$?
cluster=0
wait "$cluster_pid" || cluster=$?
trap - EXIT
echo "==> the cluster tier (run beside the rest; log $log)"
cat "$log"
echo "==> exit status: fast tier $fast, integration and fault tiers $rest, cluster tier $cluster" \
  "(5: no test selected, as when a path names one side)"
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
ok "$fast" && ok "$rest" && ok "$cluster" && ! { [ "$fast" -eq 5 ] && [ "$rest" -eq 5 ] && [ "$cluster" -eq 5 ]; }
