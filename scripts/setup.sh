#!/usr/bin/env bash
# Install everything the project needs on a fresh machine: the Python venv and the Maven jars.
# Re-running is cheap: pip and Maven reuse their caches (~/.cache/pip, ~/.m2), but never need them.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the stack runs: PostgreSQL (the dedup index and Dagster's storage). Installed only when missing.
need_apt=()
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || command -v postgres >/dev/null || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "==> installing Python dependencies (first run downloads torch, a few GB)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet --progress-bar off -e ".[dev]"

for component in kafka s3proxy; do
  if [ ! -d "deploy/local/$component/target/jars" ]; then
    echo "==> fetching $component jars from Maven Central"
    (cd "deploy/local/$component" && mvn -q -B dependency:copy-dependencies)
  fi
done
echo "==> setup done"
