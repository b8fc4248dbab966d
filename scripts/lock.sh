#!/usr/bin/env bash
# Re-pin requirements.lock after a change to pyproject.toml's dependencies (test_packaging.py fails until then).
# One universal lock (every platform and Python that requires-python allows) for setup.sh, .ci/run and the images.
# uv keeps the versions already pinned where they still satisfy the ranges; `--upgrade` moves them all, and
# `--upgrade-package NAME` one of them.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/uv pip compile --quiet pyproject.toml --extra all --universal -o requirements.lock "$@"
