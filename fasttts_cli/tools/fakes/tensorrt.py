"""A fake of the `tensorrt` Python module (10.x/11): the subset our session and build use, API-faithful.

Names, signatures, enum values and return conventions follow TensorRT's bindings (python/src/infer/
pyCore.cpp, include/NvInferRuntime.h): `set_input_shape` / `set_tensor_address` / `set_output_allocator`
/ `execute_async_v3` return bool; `get_tensor_shape` returns the dims with -1 for a size computed from
input values until the run, which reports it to the output's IOutputAllocator (`reallocate_output_async`,
else `reallocate_output`, then `notify_shape`); without an allocator such an output fails the run;
`ICudaEngine.get_tensor_location` says HOST for shape-tensor inputs, whose address must be host memory.

A "plan" is JSON (io, locations, profile, the output-dim analysis of build/onnx_shapes.py) followed by
the ONNX graph; `execute_async_v3` runs that graph with ONNX Runtime's CPU provider on the bytes at the
bound addresses of the fake CUDA device (tools/fakes/cuda.py), so numbers are real. Addresses are
checked as TensorRT requires: device memory for DEVICE tensors (inside one allocation, big enough),
host memory for HOST ones, every input shape inside the profile.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.tools.fakes import cuda as fake_cuda
from fasttts_cli.tools.fakes.trt_build import (  # noqa: F401 - the module's API
    Builder,
    IBuilderConfig,
    INetworkDefinition,
    IOptimizationProfile,
    ITensor,
    ITimingCache,
    OnnxParser,
)
from fasttts_cli.tools.fakes.trt_types import (  # noqa: F401 - the module's API
    MAGIC,
    DataType,
    Dims,
    IOutputAllocator,
    Logger,
    MemoryPoolType,
    NetworkDefinitionCreationFlag,
    TensorIOMode,
    TensorLocation,
    __version__,
    float16,
    float32,
    int8,
    int32,
    int64,
    nptype,
    uint8,
)

# ------------------------------------------------------------------------------------------ runtime


class Runtime:
    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def deserialize_cuda_engine(self, data: bytes) -> ICudaEngine | None:
        data = bytes(data)
        if not data.startswith(MAGIC):
            self.logger.log(Logger.ERROR, "the plan was not built by this TensorRT")
            return None
        n = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "little")
        start = len(MAGIC) + 8
        return ICudaEngine(json.loads(data[start : start + n]), data[start + n :], self.logger)


class ICudaEngine:
    def __init__(self, header: dict[str, Any], onnx_bytes: bytes, logger: Logger) -> None:
        self.header, self.onnx_bytes, self.logger = header, onnx_bytes, logger
        self._io = [(n, TensorIOMode.INPUT, DataType(t), s) for n, t, s in header["inputs"]] + [
            (n, TensorIOMode.OUTPUT, DataType(t), s) for n, t, s in header["outputs"]
        ]
        self._by_name = {n: (m, t, s) for n, m, t, s in self._io}
        self._ort: Any = None

    @property
    def num_io_tensors(self) -> int:
        return len(self._io)

    @property
    def num_optimization_profiles(self) -> int:
        return 1

    def get_tensor_name(self, index: int) -> str:
        return self._io[index][0]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self._by_name[name][0] if name in self._by_name else TensorIOMode.NONE

    def get_tensor_dtype(self, name: str) -> DataType:
        return self._by_name[name][1]

    def get_tensor_shape(self, name: str) -> Dims:
        return Dims(self._by_name[name][2])

    def get_tensor_location(self, name: str) -> TensorLocation:
        return TensorLocation.HOST if name in self.header["host"] else TensorLocation.DEVICE

    def is_shape_inference_io(self, name: str) -> bool:
        return name in self.header["host"]

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[Dims]:
        return [Dims(s) for s in self.header["profile"][name]]

    def create_execution_context(self) -> IExecutionContext:
        return IExecutionContext(self)

    def session(self) -> Any:
        if self._ort is None:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            self._ort = ort.InferenceSession(self.onnx_bytes, so, providers=["CPUExecutionProvider"])
        return self._ort


class IExecutionContext:
    def __init__(self, engine: ICudaEngine) -> None:
        self.engine = engine
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._addr: dict[str, int] = {}
        self._alloc: dict[str, IOutputAllocator] = {}
        self._derived: dict[str, tuple[int, ...]] = {}  # outputs' shapes from a trial run, per input shapes

    def _err(self, msg: str) -> bool:
        self.engine.logger.log(Logger.ERROR, msg)
        return False

    def set_input_shape(self, name: str, shape: Any) -> bool:
        if self.engine.get_tensor_mode(name) != TensorIOMode.INPUT:
            return self._err(f"{name} is not an input")
        shape = tuple(int(d) for d in shape)
        fixed = self.engine.get_tensor_shape(name)
        if len(shape) != len(fixed) or any(f >= 0 and f != s for f, s in zip(fixed, shape, strict=True)):
            return self._err(f"{name}: shape {shape} does not match {tuple(fixed)}")
        prof = self.engine.header["profile"].get(name)
        if prof is not None:
            lo, _, hi = prof
            if any(not (a <= s <= b) for a, s, b in zip(lo, shape, hi, strict=True)):
                return self._err(f"{name}: shape {shape} is outside the profile [{lo}, {hi}]")
        self._shapes[name] = shape
        self._derived.clear()
        return True

    def _sym_values(self) -> dict[str, int]:
        vals: dict[str, int] = {}
        for name, dims in self.engine.header["input_dims"].items():
            for d, s in zip(dims, self._shapes.get(name, ()), strict=False):
                if isinstance(d, str):
                    vals[d] = s
        return vals

    def get_tensor_shape(self, name: str) -> Dims:
        mode = self.engine.get_tensor_mode(name)
        if mode == TensorIOMode.INPUT:
            return Dims(self._shapes.get(name, self.engine.get_tensor_shape(name)))
        if len(self._shapes) < sum(1 for _, m, _, _ in self.engine._io if m == TensorIOMode.INPUT):
            return Dims(self.engine.get_tensor_shape(name))  # -1 where dynamic until every input is set
        import sympy

        from fasttts_cli.build.onnx_shapes import Dim

        vals = self._sym_values()
        out = []
        for i, j in enumerate(self.engine.header["dims"][name]):
            d = Dim.from_json(j)
            if d.kind == "const":
                out.append(d.value)
            elif d.kind == "expr":
                out.append(int(sympy.sympify(d.expr).subs(vals)))
            elif d.kind == "derived" or (d.kind == "value" and self._host_values_set(d.expr)):
                # derived from input dims, or from shape-tensor inputs whose host values are bound
                out.append(self._trial_shape(name)[i])
            else:
                out.append(-1)
        return Dims(out)

    def _host_values_set(self, reads: str) -> bool:
        names = [n for n in reads.split(",") if n]
        host = self.engine.header["host"]
        return bool(names) and all(n in host and self._addr.get(n) for n in names)

    def _trial_shape(self, name: str) -> tuple[int, ...]:
        """Dims that only a run tells: the fake runs the graph on zeros, with the bound values of the
        shape-tensor (HOST) inputs, which is all such a dim can depend on."""
        if name not in self._derived:
            sess = self.engine.session()
            feeds = {}
            for n, t, _ in self.engine.header["inputs"]:
                host = n in self.engine.header["host"] and self._addr.get(n)
                a = self._read_input(n, DataType(t)) if host else None
                feeds[n] = a if a is not None else np.zeros(self._shapes[n], nptype(DataType(t)))
            for n, v in zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True):
                self._derived[n] = tuple(v.shape)
        return self._derived[name]

    def set_tensor_address(self, name: str, memory: int) -> bool:
        if self.engine.get_tensor_mode(name) == TensorIOMode.NONE:
            return self._err(f"{name} is not an input or output")
        if memory % 256 and self.engine.get_tensor_location(name) == TensorLocation.DEVICE:
            return self._err(f"{name}: address {memory:#x} is not 256-byte aligned")
        self._addr[name] = int(memory)
        self._derived.clear()
        return True

    def get_tensor_address(self, name: str) -> int:
        return self._addr.get(name, 0)

    def set_output_allocator(self, name: str, output_allocator: IOutputAllocator) -> bool:
        if self.engine.get_tensor_mode(name) != TensorIOMode.OUTPUT:
            return self._err(f"{name} is not an output")
        if not getattr(output_allocator, "_fake_initialized", False):
            return self._err(f"{name}: the allocator did not call IOutputAllocator.__init__")
        self._alloc[name] = output_allocator
        return True

    def get_output_allocator(self, name: str) -> IOutputAllocator | None:
        return self._alloc.get(name)

    def _read_input(self, name: str, dtype: DataType) -> np.ndarray | None:
        shape, addr = self._shapes[name], self._addr.get(name, 0)
        dt = np.dtype(nptype(dtype))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        host = self.engine.get_tensor_location(name) == TensorLocation.HOST
        if nbytes == 0:
            return np.zeros(shape, dt)
        if not addr:
            return None
        if host:
            if fake_cuda.DEVICE.is_device(addr):
                self._err(f"{name} is a shape tensor (TensorLocation.HOST) but its address is device memory")
                return None
            buf = (ctypes.c_char * nbytes).from_address(addr)
            return np.frombuffer(bytes(buf), dt).reshape(shape)
        try:
            view = fake_cuda.DEVICE.view(addr, nbytes)
        except ValueError as e:
            self._err(f"{name}: {e}")
            return None
        return view.view(dt).reshape(shape).copy()

    def execute_async_v3(self, stream_handle: int) -> bool:
        feeds = {}
        for n, t, _ in self.engine.header["inputs"]:
            if n not in self._shapes:
                return self._err(f"input {n} has no shape set")
            a = self._read_input(n, DataType(t))
            if a is None:
                return self._err(f"input {n} has no valid address")
            feeds[n] = a
        expect = {n: self.get_tensor_shape(n) for n, _, _ in self.engine.header["outputs"]}
        sess = self.engine.session()
        values = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
        for n, t, _ in self.engine.header["outputs"]:
            v = np.ascontiguousarray(values[n], dtype=nptype(DataType(t)))
            unknown = any(d < 0 for d in expect[n])
            addr = self._addr.get(n, 0)
            alloc = self._alloc.get(n)
            if alloc is not None and (unknown or not addr):
                fn = getattr(alloc, "reallocate_output_async", None)
                size, align = max(v.nbytes, 1), 256
                addr = (
                    fn(n, addr, size, align, stream_handle)
                    if fn
                    else alloc.reallocate_output(n, addr, size, align)
                )
                if not addr:
                    return self._err(f"{n}: the output allocator returned no memory")
                alloc.notify_shape(n, Dims(v.shape))
            elif unknown:
                return self._err(f"{n}: its size depends on input values and it has no IOutputAllocator")
            if tuple(v.shape) != tuple(expect[n]) and not unknown:
                return self._err(f"{n}: graph gave {v.shape}, the context promised {tuple(expect[n])}")
            if v.nbytes:
                try:
                    fake_cuda.DEVICE.view(int(addr), v.nbytes)[:] = v.view(np.uint8).reshape(-1)
                except ValueError as e:
                    return self._err(f"output {n}: {e}")
        return True


def __getattr__(name: str) -> Any:
    """`trt.bool`, as the real module spells it (a global named bool would shadow the builtin here)."""
    if name == "bool":
        return DataType.BOOL
    raise AttributeError(name)


@contextlib.contextmanager
def install() -> Iterator[types.ModuleType]:
    """Put this fake (as `tensorrt`) and the fake CUDA runtime (as `cuda.bindings.runtime` and
    `cuda.cudart`) into sys.modules for the duration; the fake device starts empty."""
    fake_cuda.reset()
    me = sys.modules[__name__]
    cuda_pkg = types.ModuleType("cuda")
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = fake_cuda  # type: ignore[attr-defined]
    cuda_pkg.bindings = bindings  # type: ignore[attr-defined]
    cuda_pkg.cudart = fake_cuda  # type: ignore[attr-defined]
    names = {
        "tensorrt": me,
        "cuda": cuda_pkg,
        "cuda.bindings": bindings,
        "cuda.bindings.runtime": fake_cuda,
        "cuda.cudart": fake_cuda,
    }
    saved = {k: sys.modules.get(k) for k in names}
    sys.modules.update(names)
    try:
        yield me
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def plan_path_is_fake(path: Path | str) -> bool:
    """Whether a .plan file was written by this fake (the acceptance program reports the mode)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC
