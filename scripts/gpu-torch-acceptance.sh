#!/usr/bin/env bash
# GPU acceptance + bench of the torch backend (IndexTTS-2 parity and bench, and an IndexTTS-2.5 checkpoint on
# the device against the CPU and through both GPU torch presets): a thin wrapper around
# fasttts_cli/tools/accept_torch.py (2.5: tools/accept_torch25.py; --skip-v25 leaves it out).
#
#   bash scripts/gpu-torch-acceptance.sh --prepare     # beforehand, where PyPI works: .whl/ (the parity
#                                                      # vectors are in the tree: tests/data/parity)
#   bash scripts/gpu-torch-acceptance.sh [--quick]     # on the GPU machine (about 5 minutes; --quick 2)
#   bash scripts/gpu-torch-acceptance.sh --sim-cpu     # the same program on the CPU (what CI runs)
#
# One table at the end; accept_torch.json goes to $OUT when set. Every failed check makes the exit status 1.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m fasttts_cli.tools.accept_torch "$@"
