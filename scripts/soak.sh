#!/usr/bin/env bash
# The soak test on demand (default 10 minutes): EXT_TASKS_SOAK_SECONDS=600 bash scripts/soak.sh
# Needs the environment `bash scripts/test.sh` creates (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."
export EXT_TASKS_SOAK_SECONDS="${EXT_TASKS_SOAK_SECONDS:-600}"
exec .venv/bin/python -m pytest tests/soak -s "$@"
