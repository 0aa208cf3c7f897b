#!/usr/bin/env bash
# GPU acceptance + bench of the torch backend (issue 6), one command, from the source tree.
#
#   bash scripts/gpu-torch-acceptance.sh [bench_gpu options...]     # on the GPU machine
#   bash scripts/gpu-torch-acceptance.sh --prepare                   # beforehand, on a machine with PyPI
#
# --prepare fills the two git-ignored folders the GPU run needs (about 35 MB, under the 64 MiB a device
# call may carry): .whl/ (cp312 manylinux wheels of numpy, PyYAML and safetensors, and pytest, installed on
# the GPU machine only where the import fails) and tests/.cache/parity-src/ (a copy of ../shared/parity: the
# vectors, keys.json, buffers.npz, make_checkpoint.py; the 0.9 GB parity checkpoint is regenerated there).
# Nothing is downloaded on the GPU machine and TensorRT is not needed.
#
# The run: parity of every stage (fp32 with TF32 off at the README's 1e-4; fp16/bf16 at the tolerances of
# fasttts_cli/torch_backend/parity_torch.py), then the full-size random-weight bench at batch 1, 8, 16
# (ours vs the same modules eager in fp16), one table at the end. The JSON report goes to $OUT (the device
# tool's output folder) when set, else out/. Budget: about 3-4 minutes on one H200.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-python3}"
WHEELS="$REPO/.whl"
PARITY_COPY="$REPO/tests/.cache/parity-src"

if [[ "${1:-}" == "--prepare" ]]; then
    mkdir -p "$WHEELS" "$PARITY_COPY"
    "$PY" -m pip download --quiet --only-binary=:all: --no-deps --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        --implementation cp -d "$WHEELS" numpy pyyaml safetensors
    "$PY" -m pip download --quiet --only-binary=:all: --no-deps -d "$WHEELS" pytest pluggy iniconfig packaging pygments
    SRC="${FASTTTS_PARITY_DIR:-$REPO/../shared/parity}"
    cp -f "$SRC"/{README.md,keys.json,buffers.npz,config.yaml,bpe.model,make_checkpoint.py,ref.wav,emo.wav} "$PARITY_COPY"/
    cp -f "$SRC"/vectors_*.npz "$SRC"/vectors_*.json "$PARITY_COPY"/
    du -sh "$WHEELS" "$PARITY_COPY"
    echo "carry: .whl tests/.cache/parity-src"
    exit 0
fi

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# Small missing packages from carried wheels (system packages win: appended to the path).
missing=()
for mod in numpy yaml safetensors pytest; do
    "$PY" -c "import $mod" 2>/dev/null || missing+=("$mod")
done
if ((${#missing[@]})); then
    if [[ -d "$WHEELS" ]]; then
        DEPS="${TMPDIR:-/tmp}/fasttts-gpu-deps"
        pkgs=()
        for m in "${missing[@]}"; do
            case "$m" in yaml) pkgs+=(pyyaml) ;; *) pkgs+=("$m") ;; esac
        done
        echo "installing from .whl/: ${pkgs[*]}"
        "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --target "$DEPS" "${pkgs[@]}"
        export PYTHONPATH="$PYTHONPATH:$DEPS"
    else
        echo "missing python packages: ${missing[*]} (no .whl/ carried; parity needs yaml + safetensors)" >&2
    fi
fi

if [[ -z "${FASTTTS_PARITY_DIR:-}" ]]; then
    if [[ -d "$PARITY_COPY" ]]; then
        export FASTTTS_PARITY_DIR="$PARITY_COPY"
    elif [[ -d "$REPO/../shared/parity" ]]; then
        export FASTTTS_PARITY_DIR="$REPO/../shared/parity"
    fi
fi
REPORT_DIR="${OUT:-$REPO/out}"
mkdir -p "$REPORT_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
# The CUDA-only unit tests (graph replay == eager, fp16 close to fp32) on tiny models: seconds.
if "$PY" -c "import pytest" 2>/dev/null; then
    "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_torch_backend.py 2>&1 | tail -5 || true
fi
exec "$PY" -m fasttts_cli.torch_backend.bench_gpu \
    ${FASTTTS_PARITY_DIR:+--parity-dir "$FASTTTS_PARITY_DIR"} \
    --out "$REPORT_DIR/gpu-torch-acceptance.json" "$@"
