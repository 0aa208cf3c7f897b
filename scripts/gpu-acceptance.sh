#!/usr/bin/env bash
# GPU acceptance of the TensorRT presets (fp16, w8a16, w4a16): a thin wrapper around
# fasttts_cli/tools/accept_tensorrt.py (the TensorRT-LLM GPT has its own: fasttts_cli.tools.accept_trtllm).
#
#   bash scripts/gpu-acceptance.sh --prepare     # beforehand, where PyPI works
#   bash scripts/gpu-acceptance.sh [options]     # on a machine with an NVIDIA GPU and TensorRT
#   bash scripts/gpu-acceptance.sh --sim-cpu     # the same program through the fakes, on the CPU
#
# One table at the end; its JSON goes to $OUT when set. Every failed check makes the exit status 1.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m fasttts_cli.tools.accept_tensorrt "$@"
