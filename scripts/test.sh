#!/usr/bin/env bash
# The README's test command: set up, lint, then run the whole suite (what CI runs). The pytest session fixture
# reuses a running local stack or starts one (3 Kafka brokers, S3, MLflow, PostgreSQL) and stops what it started.
#
# One tier alone (set per test from its fixtures in pipeline_project_tests/conftest.py, `tier_of`):
#   --fast          no service: stand-ins and pure logic, on every core (pytest-xdist; PYTEST_WORKERS=N to choose);
#                   skips setup when .venv exists
#   --integration   tests against the real local stack in parallel groups on PYTEST_INTEGRATION_WORKERS (default 2)
#                   workers (pytest-xdist --dist loadgroup; the tests of one shared process, Dagster's webserver, the
#                   SASL cluster or the fault tests' stack, share a worker), then the `serial` ones (they restart a
#                   shared service) alone; 1: one test at a time. Most of a test's time is waiting on the services,
#                   so two workers take the tier from 24-25 to under 15 minutes here when it runs alone
#                   (docs/benchmarks/2026-12-07-suite-tiers.md)
#   --fault         processes of a throw-away stack killed and cut (pipeline_project_tests/reliability), one at a time
#   --cluster       the network-namespace cluster (root; pipeline_project_tests/cluster)
# Other arguments go to pytest.
#
# With no tier flag (CI): the fast tier first, alone, on every core; then the integration tier (one test at a time
# unless PYTEST_INTEGRATION_WORKERS says otherwise: beside two workers, the cluster tier's broker-cut trial needed
# a retry its assertion forbids; the session fixture starts what the stack lacks and stops only that), with the
# cluster tier and then the fault tier beside it, in sessions of their own: the cluster's tests mostly wait on cut links and restarts, and
# neither shares anything with the integration tier (their own namespaces, or the fault tests' throw-away stack on
# ports of its own). Their output is printed when all are done, then each tier's time and the load average. The
# script fails if any tier does.
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
# $1: the tiers to run: in parallel groups on PYTEST_INTEGRATION_WORKERS workers (default 2), then the `serial` tests
# alone; with 1, one test at a time.
groups_then_serial() {
  local tiers=$1 workers=${PYTEST_INTEGRATION_WORKERS:-2} groups=0 serial=0
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
fault_log=$(mktemp -t fault-tier.XXXXXX.log)
beside() {  # $1: tier, $2: its log; exit status in "$2.rc"
  local begun=$SECONDS rc=0
  .venv/bin/python -m pytest -m "$1" -p no:cacheprovider --basetemp "$(mktemp -d -t "pytest-$1.XXXXXX")" "${@:3}" \
    >"$2" 2>&1 || rc=$?
  echo "$1 tier took $(elapsed $((SECONDS - begun)))" >>"$2"
  echo "$rc" >"$2.rc"
}
(
  beside cluster "$log" "$@"
  beside fault "$fault_log" "$@"
) &
beside_pid=$!
trap 'kill "$beside_pid" 2>/dev/null || true' EXIT
rest_started=$SECONDS
rest=0
PYTEST_INTEGRATION_WORKERS=${PYTEST_INTEGRATION_WORKERS:-1} groups_then_serial integration "$@" || rest=$?
rest_s=$((SECONDS - rest_started))

wait "$beside_pid" || true
cluster=$(cat "$log.rc" 2>/dev/null || echo 1)
fault=$(cat "$fault_log.rc" 2>/dev/null || echo 1)
echo "==> the cluster tier, then the fault tier (run beside the integration tier; logs $log, $fault_log)"
cat "$log" "$fault_log"
echo "==> exit status: fast tier $fast, integration tier $rest, cluster tier $cluster, fault tier $fault" \
  "(5: no test selected)"
echo "==> took: fast tier $(elapsed "$fast_s"), integration tier $(elapsed "$rest_s"), all tiers" \
  "$(elapsed $((SECONDS - started))) (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
ok "$fast" && ok "$rest" && ok "$cluster" && ok "$fault" &&
  ! { [ "$fast" -eq 5 ] && [ "$rest" -eq 5 ] && [ "$cluster" -eq 5 ] && [ "$fault" -eq 5 ]; }
