#!/usr/bin/env bash
# Installs Arize Phoenix, the real OTLP receiver the tracing tests read traces back from, into
# a venv of its own (it pins its own OpenTelemetry, FastAPI and SQLAlchemy, which must not
# meet the gateway's). Idempotent: a venv whose stamp names the wanted package is reused at
# once; one that imports cleanly gets the stamp; anything else is made anew.
#   SLUICEGATE_PHOENIX_VENV (default $HOME/.cache/sluicegate/phoenix-venv), PYTHON (python3)
set -euo pipefail
# shellcheck source=../progress.sh
source "$(dirname "${BASH_SOURCE[0]}")/../progress.sh"
VENV="${SLUICEGATE_PHOENIX_VENV:-$HOME/.cache/sluicegate/phoenix-venv}"
PY="${PYTHON:-python3}"
PHOENIX_PACKAGE="arize-phoenix==20.26.1"
STAMP="$VENV/.sluicegate-ready"
# importing Phoenix makes its working folders: inside the venv, not in $HOME
export PHOENIX_WORKING_DIR="$VENV/.phoenix-working-dir"

if [ -x "$VENV/bin/phoenix" ]; then
  if [ "$(cat "$STAMP" 2>/dev/null)" = "$PHOENIX_PACKAGE" ]; then
    echo "phoenix venv ready (cached): $VENV"
    exit 0
  fi
  if "$VENV/bin/python" -c "import phoenix.server.main" 2>/dev/null \
    && [ "$("$VENV/bin/python" -c 'import phoenix; print(phoenix.__version__)')" = "${PHOENIX_PACKAGE#*==}" ]; then
    echo "$PHOENIX_PACKAGE" > "$STAMP"
    echo "phoenix venv ready: $VENV"
    exit 0
  fi
fi
started=$(date +%s)
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
LOG="$VENV/.sluicegate-install.log"
echo "installing $PHOENIX_PACKAGE into $VENV (about a minute cold; log: $LOG)"
run_with_progress "Phoenix install" "$LOG" "$VENV/bin/pip" install --progress-bar off \
  --root-user-action=ignore "$PHOENIX_PACKAGE"
"$VENV/bin/python" -c "import phoenix.server.main, phoenix; print('phoenix', phoenix.__version__)"
echo "$PHOENIX_PACKAGE" > "$STAMP"
echo "phoenix venv ready: $VENV (installed in $(($(date +%s) - started)) s)"
