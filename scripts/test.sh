#!/usr/bin/env bash
# The README's test command: set up, lint, then run the whole suite (what CI runs). The pytest session fixture
# reuses a running local stack or starts one (3 Kafka brokers, S3, MLflow, PostgreSQL) and stops what it started.
#
# One tier alone (set per test from its fixtures in pipeline_project_tests/conftest.py, `tier_of`):
#   --fast          no service: stand-ins and pure logic, on every core (pytest-xdist; PYTEST_WORKERS=N to choose);
#                   skips setup when .venv exists
#   --integration   tests against the real local stack, one at a time. PYTEST_INTEGRATION_WORKERS=N (N > 1) runs
#                   them in parallel groups (pytest-xdist --dist loadgroup; the tests of one shared process, Dagster's
#                   webserver, the SASL cluster or the fault tests' stack, share a worker), then the `serial` ones
#                   (they restart a shared service) alone. On 2 cores the suite is CPU-bound: groups made it slower
#                   (docs/benchmarks/2026-12-07-suite-tiers.md)
#   --fault         processes of a throw-away stack killed and cut (pipeline_project_tests/reliability), one at a time
#   --cluster       the network-namespace cluster (root; pipeline_project_tests/cluster)
# Other arguments go to pytest.
#
# With no tier flag (CI): the fast tier first, alone, on every core; then the integration and fault tiers (as
# --integration says, the fault tests among them; the session fixture starts what the stack lacks and stops only
# that), with the cluster tier beside them in a session of its own: its tests mostly wait on cut links and
# restarts, and it shares nothing with the others (its own namespaces, addresses and state). Its output is printed
# when all are done, then each tier's time and the load average. The script fails if any tier does.
set -euo pipefail
cd "$(dirname "$0")/.."
# every trainer the tests start is a tiny model on CPU: one intra-op thread each, or a few of them at once spin on
# both cores (the trainers the tests launch through Dagster inherit this)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
FAST=(-m "not integration and not fault and not cluster" -n "${PYTEST_WORKERS:-auto}")
tier=""
case "${1:-}" in
  --fast | --integration | --fault | --cluster) tier=${1#--}; shift ;;
esac
if [ "$tier" != fast ] || [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
echo "==> ruff check + ruff format --check"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: no test selected, as when a path names one tier only
# $1: the tiers to run; one test at a time by default. With PYTEST_INTEGRATION_WORKERS=N > 1 (a machine with more
# cores than this 2-core one): in parallel groups on N workers, then the `serial` tests alone.
groups_then_serial() {
  local tiers=$1 workers=${PYTEST_INTEGRATION_WORKERS:-1} groups=0 serial=0
  shift
  if [ "$workers" -le 1 ]; then
    .venv/bin/python -m pytest -m "$tiers" "$@"
    return
  fi
  .venv/bin/python -m pytest -m "($tiers) and not serial" -n "$workers" --dist loadgroup "$@" || groups=$?
  .venv/bin/python -m pytest -m "($tiers) and serial" "$@" || serial=$?
  ok "$groups" || return "$groups"
  ok "$serial" || return "$serial"
  [ "$groups" -eq 0 ] || [ "$serial" -eq 0 ] || return 5
}
case "$tier" in
  fast) exec .venv/bin/python -m pytest "${FAST[@]}" "$@" ;;
  integration) groups_then_serial integration "$@"; exit ;;
  fault) exec .venv/bin/python -m pytest -m fault "$@" ;;
  cluster) exec .venv/bin/python -m pytest -m cluster "$@" ;;
esac

elapsed() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }
started=$SECONDS
fast=0
.venv/bin/python -m pytest "${FAST[@]}" "$@" || fast=$?
fast_s=$((SECONDS - started))

log=$(mktemp -t cluster-tier.XXXXXX.log)
(
  begun=$SECONDS
  rc=0
  .venv/bin/python -m pytest -m cluster -p no:cacheprovider --basetemp "$(mktemp -d -t pytest-cluster.XXXXXX)" "$@" \
    >"$log" 2>&1 || rc=$?
  echo "cluster tier took $(elapsed $((SECONDS - begun)))" >>"$log"
  exit "$rc"
) &
cluster_pid=$!
trap 'kill "$cluster_pid" 2>/dev/null || true' EXIT
rest_started=$SECONDS
rest=0
groups_then_serial "integration or fault" "$@" || rest=$?
rest_s=$((SECONDS - rest_started))

cluster=0
wait "$cluster_pid" || cluster=$?
echo "==> the cluster tier (run beside the integration and fault tiers; log $log)"
cat "$log"
echo "==> exit status: fast tier $fast, integration and fault tiers $rest, cluster tier $cluster (5: no test selected)"
echo "==> took: fast tier $(elapsed "$fast_s"), integration and fault tiers $(elapsed "$rest_s"), all tiers" \
  "$(elapsed $((SECONDS - started))) (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
ok "$fast" && ok "$rest" && ok "$cluster" && ! { [ "$fast" -eq 5 ] && [ "$rest" -eq 5 ] && [ "$cluster" -eq 5 ]; }
