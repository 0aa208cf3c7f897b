"""ONNX Runtime on the CUDA execution provider, with IO binding that keeps the KV cache on the device.

`CudaOrtSession` implements the runtime's Session interface. Outputs named as device outputs (by
default every `present_*` of the GPT trunk) come back as `DeviceTensor`s: OrtValues that stay in GPU
memory. Fed back as the next step's `past_*` they are bound directly (no host round trip), and the
decoder's beam reordering (`kv[rows]`) runs as a Gather on the device. Everything else (logits, hidden
states) is bound to host memory, so the decoder's numpy code is unchanged.

Packaging: `onnxruntime-gpu` replaces the CPU `onnxruntime` package (both install the same
`onnxruntime` module); `gpu_stack` reports a machine that has both. The same class runs on the CPU
provider with `device="cpu"`, which is how the binding logic is tested on machines without a GPU.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.onnxruntime.session import (
    IoDescribed,
    SessionOptions,
    _info,
    ort_options,
    row_index,
)
from fasttts_cli.errors import EngineMismatchError, MissingDependencyError

DEVICE_OUTPUT_PREFIXES = ("present_",)

# One-node ONNX graphs `out = Gather(data, rows, axis=0)` (opset 17, IR 8) for float32 (1) and float16
# (10) data, serialized, so the runtime needs no `onnx` package (a build-side dependency); the tests
# rebuild them with onnx.helper and compare bytes.
GATHER_GRAPHS = {
    1: "CAgSB2Zhc3R0dHM6ZQomCgRkYXRhCgRyb3dzEgNvdXQiBkdhdGhlcioLCgRheGlzGACgAQISC2dhdGhlcl9yb3dzWgwKBGRh"
    "dGESBAoCCAFaEwoEcm93cxILCgkIBxIFCgMSAW5iCwoDb3V0EgQKAggBQgQKABAR",
    10: "CAgSB2Zhc3R0dHM6ZQomCgRkYXRhCgRyb3dzEgNvdXQiBkdhdGhlcioLCgRheGlzGACgAQISC2dhdGhlcl9yb3dzWgwKBGRh"
    "dGESBAoCCApaEwoEcm93cxILCgkIBxIFCgMSAW5iCwoDb3V0EgQKAggKQgQKABAR",
}


def _ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise MissingDependencyError(f"onnxruntime is not importable: {e}") from None
    return ort


class _Gather:
    """Row selection on the device: a one-node ONNX graph (Gather, axis 0) per dtype, run with IO
    binding so input and output stay where they are."""

    def __init__(self, device: str, device_id: int, providers: list[Any]) -> None:
        self.device, self.device_id, self.providers = device, device_id, providers
        self._sessions: dict[int, Any] = {}

    def _session(self, elem_type: int) -> Any:
        if elem_type not in self._sessions:
            if elem_type not in GATHER_GRAPHS:
                raise TypeError(f"no device row gather for ONNX element type {elem_type}")
            ort = _ort()
            self._sessions[elem_type] = ort.InferenceSession(
                base64.b64decode(GATHER_GRAPHS[elem_type]), providers=self.providers
            )
        return self._sessions[elem_type]

    def __call__(self, value: Any, rows: np.ndarray, elem_type: int) -> Any:
        sess = self._session(elem_type)
        b = sess.io_binding()
        b.bind_ortvalue_input("data", value)
        held = np.ascontiguousarray(rows, dtype=np.int64)  # bound by pointer: alive until the run returns
        b.bind_cpu_input("rows", held)
        b.bind_output("out", self.device, self.device_id)
        sess.run_with_iobinding(b)
        del held
        return b.get_outputs()[0]


_ELEM = {"float32": 1, "float16": 10, "int64": 7, "int32": 6, "bool": 9}


class DeviceTensor:
    """An OrtValue kept on the session's device, numpy-like where the decoder needs it: `.shape`,
    `.dtype`, `kv[rows]` (row gather on the device) and `np.asarray(kv)` (copy to host)."""

    def __init__(self, value: Any, gather: _Gather) -> None:
        self.value = value
        self._gather = gather

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape())

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(
            {"tensor(float)": "float32", "tensor(float16)": "float16"}.get(self.value.data_type(), "float32")
        )

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, rows: Any) -> DeviceTensor:
        idx = row_index(rows, self.shape[0])
        return DeviceTensor(self._gather(self.value, idx, _ELEM[self.dtype.name]), self._gather)

    def numpy(self) -> np.ndarray:
        return self.value.numpy() if self.value.device_name().lower() == "cpu" else _to_host(self.value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)


def _to_host(value: Any) -> np.ndarray:
    """Copy a device OrtValue to host memory (an identity graph would also do; numpy() on a CUDA value
    copies in recent ORT versions)."""
    return np.asarray(value.numpy())


class CudaOrtSession(IoDescribed):
    """onnxruntime InferenceSession on CUDA (or CPU for tests) with IO binding."""

    def __init__(
        self,
        path: Path | str,
        options: SessionOptions | None = None,
        *,
        device: str = "cuda",
        device_id: int = 0,
        device_outputs: Sequence[str] | None = None,
    ) -> None:
        ort = _ort()
        self.path = Path(path)
        if not self.path.is_file():
            raise EngineMismatchError(f"{self.path}: component file is missing")
        self.device, self.device_id = device, device_id
        if device == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise MissingDependencyError(
                    "onnxruntime has no CUDAExecutionProvider here",
                    hint="pip uninstall -y onnxruntime && pip install onnxruntime-gpu",
                )
            providers: list[Any] = [
                ("CUDAExecutionProvider", {"device_id": device_id}),
                "CPUExecutionProvider",
            ]
        elif device == "cpu":
            providers = ["CPUExecutionProvider"]
        else:
            raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
        so = ort_options(ort, options or SessionOptions())
        try:
            self._sess = ort.InferenceSession(str(self.path), sess_options=so, providers=providers)
        except Exception as e:  # ORT raises its own types for bad graphs
            raise EngineMismatchError(f"{self.path}: cannot load: {e}") from None
        self._inputs = [_info(i) for i in self._sess.get_inputs()]
        self._outputs = [_info(o) for o in self._sess.get_outputs()]
        self._in_dtype = {i.name: np.dtype(i.dtype) for i in self._inputs}
        names = [o.name for o in self._outputs]
        self.device_outputs = set(
            device_outputs
            if device_outputs is not None
            else [n for n in names if n.startswith(DEVICE_OUTPUT_PREFIXES)]
        )
        self._gather = _Gather(device, device_id, providers)

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, Any]) -> dict[str, Any]:
        missing = [n for n in self._in_dtype if n not in feeds]
        if missing:
            raise ValueError(f"{self.path.name}: missing inputs {missing}")
        b = self._sess.io_binding()
        # A bound CPU input is the array's memory, not a copy (the C++ bind_input wraps the numpy buffer;
        # onnxruntime 1.32's IOBinding.bind_cpu_input also keeps a reference, _numpy_obj_references, but
        # that is the wrapper's detail): converted arrays are held here until run_with_iobinding returns.
        held: list[Any] = []
        for name, v in feeds.items():
            if name not in self._in_dtype:
                continue
            if isinstance(v, DeviceTensor):
                b.bind_ortvalue_input(name, v.value)
                held.append(v)
            else:
                a = np.ascontiguousarray(v, dtype=self._in_dtype[name])
                held.append(a)
                b.bind_cpu_input(name, a)
        names = list(outputs) if outputs is not None else [o.name for o in self._outputs]
        for name in names:
            if name in self.device_outputs:
                b.bind_output(name, self.device, self.device_id)
            else:
                b.bind_output(name, "cpu")
        self._sess.run_with_iobinding(b)
        del held
        values = b.get_outputs()
        out: dict[str, Any] = {}
        for name, v in zip(names, values, strict=True):
            out[name] = DeviceTensor(v, self._gather) if name in self.device_outputs else v.numpy()
        return out
