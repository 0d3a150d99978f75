# Sourced by scripts/vllm/install.sh and scripts/phoenix/install.sh: a tool in a venv of its
# own, reused when cached. A stamp file in the venv names what was installed; a venv whose
# stamp names what is wanted is trusted at once, one that passes the tool's import check gets
# the stamp, anything else is made anew.
#
#   venv_reusable NAME VENV WANTED CHECK   0 (and says so) when the venv can be reused;
#                                          CHECK is a command (a shell function) run in the venv
#   venv_new VENV [PY]                     the venv removed and made again from interpreter PY
#                                          ($PYTHON, or python3, by default)
#
# It sources scripts/progress.sh too (run_with_progress), which the install scripts use.
#   venv_stamp NAME VENV WANTED STARTED    the stamp written, the install time said
# shellcheck source=progress.sh
source "$(dirname "${BASH_SOURCE[0]}")/progress.sh"

venv_reusable() {
  local name=$1 venv=$2 wanted=$3 check=$4
  [ -x "$venv/bin/python" ] || return 1
  if [ "$(cat "$venv/.sluicegate-ready" 2>/dev/null)" = "$wanted" ]; then
    echo "$name venv ready (cached): $venv"
    return 0
  fi
  "$check" || return 1
  echo "$wanted" > "$venv/.sluicegate-ready"
  echo "$name venv ready: $venv"
}

venv_new() {
  local venv=$1 py=${2:-${PYTHON:-python3}}
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv"
}

venv_stamp() {
  local name=$1 venv=$2 wanted=$3 started=$4
  echo "$wanted" > "$venv/.sluicegate-ready"
  echo "$name venv ready: $venv (installed in $(($(date +%s) - started)) s)"
}
