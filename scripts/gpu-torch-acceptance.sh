#!/usr/bin/env bash
# GPU acceptance + bench of the torch backend: a thin wrapper around fasttts_cli/tools/accept_torch.py.
#
#   bash scripts/gpu-torch-acceptance.sh --prepare     # beforehand, where PyPI works: .whl/ + parity copy
#   bash scripts/gpu-torch-acceptance.sh [--quick]     # on the GPU machine (about 5 minutes; --quick 2)
#   bash scripts/gpu-torch-acceptance.sh --sim-cpu     # the same program on the CPU (what CI runs)
#
# One table at the end; accept_torch.json goes to $OUT when set. Every failed check makes the exit status 1.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m fasttts_cli.tools.accept_torch "$@"
