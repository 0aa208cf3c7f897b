"""Reading and writing .safetensors files with numpy only (8-byte header length, JSON header, raw data).

The converter writes the TensorRT-LLM checkpoint with it and the worker's reference backend and the fake
TensorRT-LLM engine read it back, in environments that need not have the `safetensors` package."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

_ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int8): "I8"}


def _to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(np.isnan(a), 0x7FC0, rounded).astype(np.uint16)


def write_safetensors(path: Path, tensors: Mapping[str, np.ndarray], *, dtype: str = "float16") -> None:
    """Write a .safetensors file (8-byte header length, JSON header, raw little-endian data), casting
    float tensors to `dtype` (float32|float16|bfloat16). Written atomically."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if np.issubdtype(a.dtype, np.floating):
            if dtype == "bfloat16":
                a, code = _to_bf16_bits(a), "BF16"
            else:
                a = a.astype(np.float16 if dtype == "float16" else np.float32)
                code = _ST_DTYPES[a.dtype]
        else:
            code = _ST_DTYPES.get(a.dtype)
            if code is None:
                raise ValueError(f"{name}: dtype {a.dtype} is not supported")
        raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read back (float32 for BF16); for tests and for `finalize`."""
    return parse_safetensors(Path(path).read_bytes())


def parse_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a .safetensors file's bytes (float32 for BF16)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    kinds = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "BF16": np.uint16}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        a = np.frombuffer(data[base + b : base + e], dtype=np.dtype(kinds[h["dtype"]]).newbyteorder("<"))
        a = a.reshape(h["shape"])
        if h["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a
    return out
