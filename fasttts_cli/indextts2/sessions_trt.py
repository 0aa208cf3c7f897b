"""TensorRT runner behind the runtime's Session interface (numpy in, numpy out, by name).

One execution context per plan, one CUDA stream, device buffers per io tensor kept between calls and
grown when a call needs more (decode steps reuse them without allocating). Shapes are set per call
(`set_input_shape`), output shapes read back from the context, and the plan runs with
`execute_async_v3`. CUDA memory and copies go through cuda-python's runtime binding
(`cuda.bindings.runtime`, or `cuda.cudart` in older cuda-python); nothing is imported until a session
is opened, so CPU-only installs never touch TensorRT.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.errors import EngineMismatchError, MissingDependencyError, SynthesisError
from fasttts_cli.indextts2.sessions import SessionOptions, TensorInfo

MIN_BUFFER = 256  # bytes: zero-size tensors (an empty KV cache) still get a valid address


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]  # cuda-python < 12.6
        except ImportError as e:
            raise MissingDependencyError(
                f"cuda-python is not importable ({e})", hint="pip install 'cuda-python>=12'"
            ) from None
    return cudart


def _trt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as e:
        raise MissingDependencyError(
            f"tensorrt is not importable ({e})", hint="pip install 'fasttts-cli[gpu]' (NVIDIA GPU machines)"
        ) from None
    return trt


def check_cuda(result: Any, what: str) -> Any:
    """cuda-python calls return (err, *values); raise on err != 0, return the values."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        raise SynthesisError(f"CUDA error in {what}: {err}")
    return rest[0] if len(rest) == 1 else rest


def grow(capacity: int, need: int) -> int:
    """New capacity for a buffer that must hold `need` bytes: 1.5x headroom so a growing KV cache
    reallocates O(log n) times, never below MIN_BUFFER."""
    if capacity > 0 and need <= capacity:
        return capacity
    return max(MIN_BUFFER, need + need // 2)


class BufferPool:
    """Named device buffers that only grow. malloc/free are injectable (tests use fakes)."""

    def __init__(self, malloc: Callable[[int], int], free: Callable[[int], None]) -> None:
        self._malloc, self._free = malloc, free
        self._bufs: dict[str, tuple[int, int]] = {}  # name -> (ptr, capacity)

    def get(self, name: str, nbytes: int) -> int:
        ptr, cap = self._bufs.get(name, (0, 0))
        new_cap = grow(cap, nbytes)
        if new_cap != cap:
            if ptr:
                self._free(ptr)
            ptr = self._malloc(new_cap)
            self._bufs[name] = (ptr, new_cap)
        return ptr

    def capacity(self, name: str) -> int:
        return self._bufs.get(name, (0, 0))[1]

    def close(self) -> None:
        for ptr, _ in self._bufs.values():
            if ptr:
                self._free(ptr)
        self._bufs.clear()


class TrtSession:  # pragma: no cover - needs an NVIDIA GPU with TensorRT and cuda-python
    """A TensorRT plan behind the Session interface."""

    def __init__(self, path: Path | str, options: SessionOptions | None = None, *, device: int = 0) -> None:
        del options  # threads/providers do not apply to TensorRT
        self.path = Path(path)
        if not self.path.is_file():
            raise EngineMismatchError(f"{self.path}: component file is missing")
        trt, cudart = _trt(), _cudart()
        self._trt, self._cudart = trt, cudart
        check_cuda(cudart.cudaSetDevice(device), "cudaSetDevice")
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self._engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
        if self._engine is None:
            raise EngineMismatchError(
                f"{self.path}: TensorRT {trt.__version__} cannot load this plan",
                hint="plans are specific to the GPU and TensorRT version: rebuild with `fasttts build`",
            )
        self._context = self._engine.create_execution_context()
        self._stream = check_cuda(cudart.cudaStreamCreate(), "cudaStreamCreate")
        self._pool = BufferPool(
            lambda n: int(check_cuda(cudart.cudaMalloc(n), "cudaMalloc")),
            lambda p: check_cuda(cudart.cudaFree(p), "cudaFree"),
        )
        ins, outs = [], []
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            shape = tuple(int(d) if d >= 0 else None for d in self._engine.get_tensor_shape(name))
            info = TensorInfo(name, shape, dtype.name)
            (ins if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outs).append(info)
        self._inputs, self._outputs = ins, outs

    @property
    def inputs(self) -> list[TensorInfo]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorInfo]:
        return list(self._outputs)

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cudart, ctx = self._cudart, self._context
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        keep = []  # host arrays must outlive the async copies
        for info in self._inputs:
            if info.name not in feeds:
                raise ValueError(f"{self.path.name}: missing input {info.name}")
            a = np.ascontiguousarray(feeds[info.name], dtype=info.dtype)
            keep.append(a)
            if not ctx.set_input_shape(info.name, a.shape):
                raise SynthesisError(
                    f"{self.path.name}: input {info.name} shape {a.shape} is outside the plan's profile"
                )
            ptr = self._pool.get(info.name, a.nbytes)
            if a.nbytes:
                check_cuda(
                    cudart.cudaMemcpyAsync(ptr, a.ctypes.data, a.nbytes, h2d, self._stream), "H2D copy"
                )
            ctx.set_tensor_address(info.name, ptr)
        results: dict[str, np.ndarray] = {}
        for info in self._outputs:
            shape = tuple(ctx.get_tensor_shape(info.name))
            if any(d < 0 for d in shape):
                raise SynthesisError(f"{self.path.name}: output {info.name} shape unresolved: {shape}")
            host = np.empty(shape, dtype=info.dtype)
            ctx.set_tensor_address(info.name, self._pool.get(info.name, host.nbytes))
            results[info.name] = host
        if not ctx.execute_async_v3(self._stream):
            raise SynthesisError(f"{self.path.name}: TensorRT execution failed")
        names = list(outputs) if outputs is not None else [o.name for o in self._outputs]
        for name in names:
            host = results[name]
            if host.nbytes:
                ptr = self._pool.get(name, host.nbytes)
                check_cuda(
                    cudart.cudaMemcpyAsync(host.ctypes.data, ptr, host.nbytes, d2h, self._stream), "D2H copy"
                )
        check_cuda(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        del keep
        return {n: results[n] for n in names}

    def close(self) -> None:
        self._pool.close()
        if getattr(self, "_stream", None) is not None:
            check_cuda(self._cudart.cudaStreamDestroy(self._stream), "cudaStreamDestroy")
            self._stream = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown may have torn CUDA down already
            self.close()
