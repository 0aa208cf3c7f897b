"""Session: the one interface the runtime uses to run a built component (ONNX Runtime CPU here; ORT on
CUDA with IO binding in sessions_cuda, TensorRT plans in sessions_trt).

The runtime hands numpy arrays in and gets numpy arrays out by name; it never sees the backend (a GPU
backend may hand back device tensors for the KV cache, which the decoder only feeds back and reorders).
Every backend implements the same three members.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fasttts_cli.errors import EngineMismatchError, MissingDependencyError

THREADS_ENV = "FASTTTS_THREADS"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | str | None, ...]  # ints for fixed axes, names (or None) for dynamic ones
    dtype: str  # numpy dtype name, e.g. "float32", "int64"


@runtime_checkable
class Session(Protocol):
    """A loaded component. `run(None, feeds)` returns every output."""

    @property
    def inputs(self) -> list[TensorInfo]: ...

    @property
    def outputs(self) -> list[TensorInfo]: ...

    def run(
        self, outputs: Sequence[str] | None, feeds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class SessionOptions:
    """Backend-neutral knobs. threads None: $FASTTTS_THREADS, else every CPU this process may use.

    The count is always set explicitly: left at 0, onnxruntime pins each session's pool threads to
    cores, and with an engine's dozen sessions in one process the pinned threads and the caller end up
    sharing a core (measured: BigVGAN 20% slower with every session open, none with an explicit 2)."""

    threads: int | None = None
    inter_op_threads: int = 1
    # Whether the pool's workers keep spinning after a run. Off by default: an engine alternates its
    # sessions (the s2mel pieces: 34 per Euler step), and each session's spinning workers took the
    # cores from the next one: a full-size cached DiT step (T0, 344 frames, 2 threads) took 1.9-2.2x
    # as long with spinning, in alternating runs. The GPT trunk keeps it: it runs back to back.
    spin_after_run: bool = False
    graph_optimization: str = "all"  # "disable" | "basic" | "extended" | "all"
    providers: tuple[str, ...] = ("CPUExecutionProvider",)

    def resolved_threads(self) -> int:
        if self.threads is not None:
            return self.threads
        env = os.environ.get(THREADS_ENV)
        if env:
            try:
                n = int(env)
            except ValueError:
                raise EngineMismatchError(f"${THREADS_ENV}={env!r} is not an integer") from None
            return n if n > 0 else available_cpus()
        return available_cpus()


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
}


class IoDescribed:
    """The Session interface's `inputs` / `outputs`, from the `_inputs` / `_outputs` a backend fills."""

    _inputs: list[TensorInfo]
    _outputs: list[TensorInfo]

    @property
    def inputs(self) -> list[TensorInfo]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorInfo]:
        return list(self._outputs)


def row_index(rows: Any, n: int) -> np.ndarray:
    """A device tensor's `kv[rows]` index: a 1-D integer array (negative counts from the end), checked
    against the n rows it selects from."""
    idx = np.asarray(rows)
    if idx.dtype == bool or idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError("DeviceTensor supports row selection with a 1-D integer array only")
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"row index out of range for {n} rows")
    return np.where(idx < 0, idx + n, idx).astype(np.int64)


def ort_options(ort: Any, opts: SessionOptions) -> Any:
    """An onnxruntime SessionOptions with the intra-op thread count of `opts` (every ORT session)."""
    so = ort.SessionOptions()
    n = opts.resolved_threads()
    if n:
        so.intra_op_num_threads = n
    return so


class OrtSession(IoDescribed):
    """onnxruntime InferenceSession behind the Session interface. Casts feeds to the declared dtype."""

    def __init__(self, path: Path | str, options: SessionOptions | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:  # a base dependency, but keep the message clear
            raise MissingDependencyError(f"onnxruntime is not importable: {e}") from None
        self.path = Path(path)
        if not self.path.is_file():
            raise EngineMismatchError(f"{self.path}: component file is missing")
        opts = options or SessionOptions()
        so = ort_options(ort, opts)
        so.inter_op_num_threads = max(1, opts.inter_op_threads)
        if not opts.spin_after_run:
            so.add_session_config_entry("session.force_spinning_stop", "1")
        levels = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }
        if opts.graph_optimization not in levels:
            raise ValueError(f"graph_optimization must be one of {sorted(levels)}")
        so.graph_optimization_level = levels[opts.graph_optimization]
        available = set(ort.get_available_providers())
        providers = [p for p in opts.providers if p in available]
        if not providers:
            raise MissingDependencyError(
                f"none of the providers {list(opts.providers)} is available in onnxruntime "
                f"(available: {sorted(available)})"
            )
        try:
            self._sess = ort.InferenceSession(str(self.path), sess_options=so, providers=providers)
        except Exception as e:  # onnxruntime raises its own exception types for bad graphs
            raise EngineMismatchError(f"{self.path}: cannot load: {e}") from None
        self._inputs = [_info(i) for i in self._sess.get_inputs()]
        self._outputs = [_info(o) for o in self._sess.get_outputs()]
        self._in_dtype = {i.name: np.dtype(i.dtype) for i in self._inputs}

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self._in_dtype if n not in feeds]
        if missing:
            raise ValueError(f"{self.path.name}: missing inputs {missing}")
        cast = {
            k: np.ascontiguousarray(v, dtype=self._in_dtype[k])
            for k, v in feeds.items()
            if k in self._in_dtype
        }
        names = list(outputs) if outputs is not None else [o.name for o in self._outputs]
        values = self._sess.run(names, cast)
        return dict(zip(names, values, strict=True))

    def bind_inplace(
        self, outputs: Sequence[str], inplace: Mapping[str, tuple[str, np.ndarray]]
    ) -> InplaceBinding:
        """An IO binding with buffers updated in place, for `run_bound`: inplace[input] = (output, array)
        binds one array (C-contiguous, the input's dtype) as both that input and that output, so the
        graph writes its result into the array instead of a new one (the in-place KV cache of
        `decode_inplace`). A decode step reuses the binding while its buffers stay the same arrays:
        binding the 48 cache arrays anew was most of a step's host time."""
        import onnxruntime as ort

        io = self._sess.io_binding()
        for name in outputs:  # first: get_outputs() lists outputs in binding order
            io.bind_output(name)
        values = []
        for name, (out, arr) in inplace.items():
            if not arr.flags.c_contiguous or arr.dtype != self._in_dtype[name]:
                raise ValueError(
                    f"{self.path.name}: in-place buffer {name} must be C-contiguous {self._in_dtype[name]}"
                )
            value = ort.OrtValue.ortvalue_from_numpy(arr)
            io.bind_ortvalue_input(name, value)
            io.bind_ortvalue_output(out, value)
            values.append(value)
        return InplaceBinding(io, tuple(outputs), [a for _, a in inplace.values()], values)

    def run_bound(self, binding: InplaceBinding, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run with a `bind_inplace` binding and these feeds (bound anew each call)."""
        io = binding.io
        arrays = {k: np.ascontiguousarray(v, dtype=self._in_dtype[k]) for k, v in feeds.items()}
        for k, v in arrays.items():  # io keeps only pointers: `arrays` lives until the run returns
            io.bind_cpu_input(k, v)
        for name in binding.outputs:  # a fresh output each run (the last run's stays with its caller)
            io.bind_output(name)
        self._sess.run_with_iobinding(io)
        n = len(binding.outputs)
        return {k: v.numpy() for k, v in zip(binding.outputs, io.get_outputs()[:n], strict=True)}


@dataclass
class InplaceBinding:
    """An IO binding with in-place buffers bound (OrtSession.bind_inplace). It holds the arrays and
    their OrtValues, so they live as long as the binding."""

    io: Any
    outputs: tuple[str, ...]
    arrays: list[np.ndarray]
    values: list[Any]

    def holds(self, arrays: Sequence[np.ndarray]) -> bool:
        """Whether these are exactly the arrays bound (the same objects, in order)."""
        return len(arrays) == len(self.arrays) and all(
            a is b for a, b in zip(arrays, self.arrays, strict=True)
        )


def _info(node: object) -> TensorInfo:
    shape = tuple(d if isinstance(d, int) else (d or None) for d in node.shape)  # type: ignore[attr-defined]
    return TensorInfo(node.name, shape, _ORT_TYPES.get(node.type, node.type))  # type: ignore[attr-defined]


def open_session(
    path: Path | str, backend: str = "onnxruntime-cpu", options: SessionOptions | None = None
) -> Session:
    """Open a component for `backend` (the manifest's per-component backend name).

    onnxruntime-cuda uses IO binding with the KV cache kept on the GPU (sessions_cuda); tensorrt runs a
    `.plan` (sessions_trt). Both import their GPU stacks only here, so CPU installs never touch them.
    """
    if backend == "onnxruntime-cpu":
        return OrtSession(path, options)
    if backend == "onnxruntime-cuda":
        from fasttts_cli.backends.onnxruntime.cuda_session import CudaOrtSession

        return CudaOrtSession(path, options)
    if backend == "tensorrt":
        from fasttts_cli.backends.tensorrt.session import TrtSession

        return TrtSession(path, options)
    raise MissingDependencyError(
        f"{path}: backend {backend!r} has no Session in this runtime",
        hint="use an engine built for onnxruntime-cpu, onnxruntime-cuda or tensorrt",
    )
