#!/usr/bin/env bash
# Both soak tests on demand (default 10 minutes each): the mixed load (tests/soak/test_soak.py) and the
# same load beside hostile clients (tests/soak/test_hostile_soak.py).
#   bash scripts/soak.sh                                   # 10 + 10 minutes
#   EXT_TASKS_SOAK_SECONDS=120 EXT_TASKS_HOSTILE_SOAK_SECONDS=300 bash scripts/soak.sh
#   bash scripts/soak.sh -k hostile                        # extra arguments go to pytest
# Needs the environment `bash scripts/test.sh` creates (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."
export EXT_TASKS_SOAK_SECONDS="${EXT_TASKS_SOAK_SECONDS:-600}"
export EXT_TASKS_HOSTILE_SOAK_SECONDS="${EXT_TASKS_HOSTILE_SOAK_SECONDS:-600}"
exec .venv/bin/python -m pytest tests/soak -s "$@"
