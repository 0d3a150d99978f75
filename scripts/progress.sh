# Sourced by scripts/test.sh and scripts/venv_stamp.sh (the install scripts): long, quiet steps say they are alive.
#
#   run_with_progress LABEL LOG CMD [ARGS...]
#
# Runs CMD with its output in LOG. Every SLUICEGATE_PROGRESS_S seconds (default 20) while it
# runs, prints "    LABEL: N s, <the log's last line>"; when it fails, prints the log's last
# 40 lines to stderr. Returns CMD's exit status.
run_with_progress() {
  local label=$1 log=$2
  shift 2
  local every=${SLUICEGATE_PROGRESS_S:-20}
  local start pid rc=0 next now
  start=$(date +%s)
  next=$((start + every))
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    now=$(date +%s)
    if [ "$now" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      echo "    $label: $((now - start)) s, $(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c1-110)"
      next=$((next + every))
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$log" >&2
  fi
  return "$rc"
}
