"""TensorRT runner behind the runtime's Session interface (numpy in, numpy out, by name).

One execution context per plan, one CUDA stream, device buffers per io tensor kept between calls and
grown when a call needs more. Per call: every input's shape is set (`set_input_shape`) and its address
bound, then each output's shape is read back (`get_tensor_shape`); the plan runs with
`execute_async_v3`. The TensorRT API facts this relies on (include/NvInferRuntime.h,
IExecutionContext::setTensorAddress and ICudaEngine::getTensorLocation):

- an output whose size depends on input values (s2mel_content's `cond`, the length regulator's `y`)
  reads -1 until the run; it gets an IOutputAllocator (backends/tensorrt/device.output_allocator), which
  TensorRT asks for memory and tells the shape;
- an input whose location is TensorLocation.HOST (a shape tensor) is bound to host memory, kept alive
  until the run returns; every other input is copied to the device;
- `present_*` outputs (the GPT trunk's KV cache) stay on the device as DeviceTensors: fed back as the
  next step's `past_*` they are bound by address, and the decoder's `kv[rows]` reorders rows on the device.

CUDA goes through cuda-python's runtime binding (`cuda.bindings.runtime`, or `cuda.cudart` in older
cuda-python); nothing is imported until a session is opened, so CPU-only installs never touch TensorRT.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.onnxruntime.session import IoDescribed, SessionOptions, TensorInfo
from fasttts_cli.backends.tensorrt.device import (  # noqa: F401 - MIN_BUFFER, grow: this module's API
    MIN_BUFFER,
    Arena,
    BufferPool,
    DeviceTensor,
    check_cuda,
    grow,
    output_allocator,
)
from fasttts_cli.errors import EngineMismatchError, MissingDependencyError, SynthesisError

DEVICE_OUTPUT_PREFIXES = ("present_",)


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]  # cuda-python < 12.6
        except ImportError as e:
            raise MissingDependencyError(
                f"cuda-python is not importable ({e})", hint="pip install 'fasttts-cli[gpu]'"
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


class TrtSession(IoDescribed):
    """A TensorRT plan behind the Session interface."""

    def __init__(
        self,
        path: Path | str,
        options: SessionOptions | None = None,
        *,
        device: int = 0,
        device_outputs: Sequence[str] | None = None,
    ) -> None:
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
        self._arena = Arena(cudart, self._stream)
        self._allocator = output_allocator(trt, self._pool)
        self._allocated: set[str] = set()  # outputs bound to the allocator
        ins, outs = [], []
        self._host_inputs: set[str] = set()
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            shape = tuple(int(d) if d >= 0 else None for d in self._engine.get_tensor_shape(name))
            info = TensorInfo(name, shape, dtype.name)
            if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                ins.append(info)
                if self._engine.get_tensor_location(name) == trt.TensorLocation.HOST:
                    self._host_inputs.add(name)
            else:
                outs.append(info)
        self._inputs, self._outputs = ins, outs
        names = [o.name for o in outs]
        self.device_outputs = set(
            device_outputs
            if device_outputs is not None
            else [n for n in names if n.startswith(DEVICE_OUTPUT_PREFIXES)]
        )

    def _bind_input(self, info: TensorInfo, value: Any, keep: list[Any]) -> None:
        ctx = self._context
        if isinstance(value, DeviceTensor):
            if value.dtype != np.dtype(info.dtype):
                raise SynthesisError(
                    f"{self.path.name}: input {info.name} is a {value.dtype} device tensor, the plan "
                    f"wants {info.dtype}"
                )
            shape, ptr = value.shape, value.ptr
        else:
            a = np.ascontiguousarray(value, dtype=info.dtype)
            shape = a.shape
            if info.name in self._host_inputs:
                # a shape tensor: TensorRT reads host memory (at enqueue), so the array must outlive the run
                ptr = a.ctypes.data
            else:
                ptr = self._pool.get(info.name, a.nbytes)
                self._arena.copy(ptr, a.ctypes.data, a.nbytes, "H2D")
            value = a
        keep.append(value)  # host arrays outlive the async copies; device tensors their reads
        if not ctx.set_input_shape(info.name, shape):
            raise SynthesisError(
                f"{self.path.name}: input {info.name} shape {tuple(shape)} is outside the plan's profile"
            )
        if not ctx.set_tensor_address(info.name, ptr):
            raise SynthesisError(f"{self.path.name}: cannot bind input {info.name}")

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, Any]) -> dict[str, Any]:
        ctx = self._context
        keep: list[Any] = []
        for info in self._inputs:
            if info.name not in feeds:
                raise ValueError(f"{self.path.name}: missing input {info.name}")
            self._bind_input(info, feeds[info.name], keep)
        names = list(outputs) if outputs is not None else [o.name for o in self._outputs]
        wanted = set(names)
        results: dict[str, Any] = {}
        for info in self._outputs:
            shape = tuple(int(d) for d in ctx.get_tensor_shape(info.name))
            if any(d < 0 for d in shape):
                # size known only while running: TensorRT asks the allocator (address nullptr until then)
                if info.name not in self._allocated:
                    if not ctx.set_output_allocator(info.name, self._allocator):
                        raise SynthesisError(f"{self.path.name}: cannot set an allocator for {info.name}")
                    self._allocated.add(info.name)
                ctx.set_tensor_address(info.name, 0)
                continue
            if info.name in self.device_outputs and info.name in wanted:
                dev = DeviceTensor(self._arena, shape, np.dtype(info.dtype))
                ptr = dev.ptr
                results[info.name] = dev
            else:
                host = np.empty(shape, dtype=info.dtype)
                ptr = self._pool.get(info.name, host.nbytes)
                results[info.name] = host
            if not ctx.set_tensor_address(info.name, ptr):
                raise SynthesisError(f"{self.path.name}: cannot bind output {info.name}")
        if not ctx.execute_async_v3(self._stream):
            raise SynthesisError(f"{self.path.name}: TensorRT execution failed")
        for name in names:
            if name in self._allocated and name not in results:
                shape = self._allocator.shapes.get(name)
                if shape is None:
                    raise SynthesisError(f"{self.path.name}: TensorRT did not report the shape of {name}")
                info = next(o for o in self._outputs if o.name == name)
                host = np.empty(shape, dtype=info.dtype)
                self._arena.copy(host.ctypes.data, self._allocator.addresses[name], host.nbytes, "D2H")
                results[name] = host
            elif isinstance(results[name], np.ndarray):
                host = results[name]
                self._arena.copy(host.ctypes.data, self._pool.get(name, host.nbytes), host.nbytes, "D2H")
        self._arena.sync()
        del keep
        return {n: results[n] for n in names}

    def close(self) -> None:
        self._pool.close()
        if getattr(self, "_arena", None) is not None:
            self._arena.close()
        if getattr(self, "_stream", None) is not None:
            check_cuda(self._cudart.cudaStreamDestroy(self._stream), "cudaStreamDestroy")
            self._stream = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown may have torn CUDA down already
            self.close()
