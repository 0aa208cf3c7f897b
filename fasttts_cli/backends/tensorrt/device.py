"""Device memory for the TensorRT session: a recycling arena, tensors that stay on the GPU, and the
output allocator for outputs whose size TensorRT learns only while running.

`DeviceTensor` is what the session returns for the GPT trunk's `present_*` outputs: fed back as the
next step's `past_*` it is bound by address (no host round trip per token, and in the plan's own dtype,
fp16 for an fp16 plan), and the decoder's beam reordering `kv[rows]` copies rows device to device.
cuda-python is passed in (the real `cuda.bindings.runtime` or tools/fakes/cuda.py), never imported here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from fasttts_cli.errors import SynthesisError

MIN_BUFFER = 256  # bytes: zero-size tensors (an empty KV cache) still get a valid address


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


def bucket(nbytes: int) -> int:
    """Arena size class: the next power of two (>= MIN_BUFFER), so a cache growing one token a step
    reuses the buffers the previous steps released."""
    return max(MIN_BUFFER, 1 << max(0, int(nbytes) - 1).bit_length())


class BufferPool:
    """Named device buffers that only grow (one per io tensor). malloc/free are injectable."""

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


class Arena:
    """Device buffers handed out by size class and taken back when their DeviceTensor dies. Reuse is
    safe without events: every copy and run of a session is on its one stream, in order."""

    def __init__(self, cudart: Any, stream: Any) -> None:
        self.cudart, self.stream = cudart, stream
        self._free: dict[int, list[int]] = {}
        self._live = 0
        self.closed = False

    def take(self, nbytes: int) -> tuple[int, int]:
        cap = bucket(nbytes)
        free = self._free.get(cap)
        ptr = free.pop() if free else int(check_cuda(self.cudart.cudaMalloc(cap), "cudaMalloc"))
        self._live += 1
        return ptr, cap

    def give(self, ptr: int, cap: int) -> None:
        self._live -= 1
        if self.closed:
            check_cuda(self.cudart.cudaFree(ptr), "cudaFree")
        else:
            self._free.setdefault(cap, []).append(ptr)

    def close(self) -> None:
        """Free the idle buffers; live tensors free theirs when they die."""
        self.closed = True
        for ptrs in self._free.values():
            for p in ptrs:
                check_cuda(self.cudart.cudaFree(p), "cudaFree")
        self._free.clear()

    def copy(self, dst: int, src: int, nbytes: int, kind: str) -> None:
        kinds = self.cudart.cudaMemcpyKind
        k = {
            "H2D": kinds.cudaMemcpyHostToDevice,
            "D2H": kinds.cudaMemcpyDeviceToHost,
            "D2D": kinds.cudaMemcpyDeviceToDevice,
        }[kind]
        if nbytes:
            check_cuda(self.cudart.cudaMemcpyAsync(dst, src, nbytes, k, self.stream), f"{kind} copy")

    def sync(self) -> None:
        check_cuda(self.cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")


class DeviceTensor:
    """A C-contiguous array in device memory, numpy-like where the decoder needs it: `.shape`,
    `.dtype`, `kv[rows]` (row gather on the device) and `np.asarray(kv)` (copy to host)."""

    def __init__(self, arena: Arena, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.arena, self.shape, self.dtype = arena, tuple(int(d) for d in shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr, self._cap = arena.take(self.nbytes)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, rows: Any) -> DeviceTensor:
        from fasttts_cli.backends.onnxruntime.session import row_index

        n = self.shape[0]
        idx = row_index(rows, n)
        out = DeviceTensor(self.arena, (idx.size, *self.shape[1:]), self.dtype)
        row = self.nbytes // n if n else 0
        start = 0
        # one copy per run of consecutive source rows (beams that stay in order copy as one block)
        for end in range(1, idx.size + 1):
            if end == idx.size or idx[end] != idx[end - 1] + 1:
                k = end - start
                self.arena.copy(out.ptr + start * row, self.ptr + int(idx[start]) * row, k * row, "D2D")
                start = end
        return out

    def numpy(self) -> np.ndarray:
        host = np.empty(self.shape, self.dtype)
        self.arena.copy(host.ctypes.data, self.ptr, self.nbytes, "D2H")
        self.arena.sync()
        return host

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown may have torn CUDA down already
            self.arena.give(self.ptr, self._cap)


def output_allocator(trt: Any, pool: BufferPool) -> Any:
    """An IOutputAllocator for outputs whose size depends on input values: TensorRT asks it for memory
    once it knows the size (reallocate_output_async, or reallocate_output in older TensorRT; both return
    the address as an int) and then reports the shape (notify_shape). Memory comes from `pool`, under
    the tensor's name, so a decode loop reuses it."""

    class _OutputAllocator(trt.IOutputAllocator):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)  # pybind11 base: must be initialized explicitly
            self.shapes: dict[str, tuple[int, ...]] = {}
            self.addresses: dict[str, int] = {}

        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int:
            ptr = pool.get(f"allocator:{tensor_name}", max(int(size), 1))
            self.addresses[tensor_name] = ptr
            return ptr

        def reallocate_output_async(
            self, tensor_name: str, memory: int, size: int, alignment: int, stream: int
        ) -> int:
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            self.shapes[tensor_name] = tuple(int(d) for d in shape)

    return _OutputAllocator()
