#!/usr/bin/env bash
# Installs Arize Phoenix, the real OTLP receiver the tracing tests read traces back from, into
# a venv of its own (it pins its own OpenTelemetry, FastAPI and SQLAlchemy, which must not
# meet the gateway's). Idempotent: a venv whose stamp names the wanted package is reused at
# once; one that imports cleanly gets the stamp; anything else is made anew
# (scripts/venv_stamp.sh).
#   SLUICEGATE_PHOENIX_VENV (default $HOME/.cache/sluicegate/phoenix-venv), PYTHON (python3)
set -euo pipefail
# shellcheck source=../venv_stamp.sh
source "$(dirname "${BASH_SOURCE[0]}")/../venv_stamp.sh"
VENV="${SLUICEGATE_PHOENIX_VENV:-$HOME/.cache/sluicegate/phoenix-venv}"
PHOENIX_PACKAGE="arize-phoenix==20.26.1"
# importing Phoenix makes its working folders: inside the venv, not in $HOME
export PHOENIX_WORKING_DIR="$VENV/.phoenix-working-dir"

imports_cleanly() {
  [ "$("$VENV/bin/python" -c "import phoenix.server.main, phoenix; print(phoenix.__version__)" \
    2>/dev/null)" = "${PHOENIX_PACKAGE#*==}" ]
}

venv_reusable phoenix "$VENV" "$PHOENIX_PACKAGE" imports_cleanly && exit 0
started=$(date +%s)
venv_new "$VENV"
LOG="$VENV/.sluicegate-install.log"
echo "installing $PHOENIX_PACKAGE into $VENV (2 to 3 min cold on 2 cores, 850 MB; log: $LOG)"
run_with_progress "Phoenix install" "$LOG" "$VENV/bin/pip" install --progress-bar off \
  --root-user-action=ignore "$PHOENIX_PACKAGE"
imports_cleanly || { echo "FAIL: Phoenix does not import from $VENV" >&2; exit 1; }
venv_stamp phoenix "$VENV" "$PHOENIX_PACKAGE" "$started"
