"""A fake of cuda-python's runtime binding (`cuda.bindings.runtime`, formerly `cuda.cudart`): the calls our
TensorRT session and build use, with cuda-python's conventions.

Conventions kept from cuda-python (cuda/bindings/runtime.pyx): every call returns a tuple whose first item
is a `cudaError_t` (`(err,)` or `(err, value)`); pointers and streams are plain ints; `cudaMemcpyKind`
values are CUDA's (HostToHost 0, HostToDevice 1, DeviceToHost 2, DeviceToDevice 3, Default 4).

"Device" memory is host memory owned by this module (numpy byte buffers) and addressed by its real
integer address, so `cudaMemcpyAsync` is a memmove. What a real GPU would reject, the fake rejects too: a
copy whose device side is not inside one allocation, a host side that is device memory, a free of an
unknown pointer. Every copy is counted by kind and size (`DEVICE.copies`), which is how tests see that
a KV cache stays on the device between decode steps.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

ALIGN = 256  # cudaMalloc returns 256-byte aligned memory; TensorRT requires it of tensor addresses


class cudaError_t(IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInvalidDevice = 101
    cudaErrorInvalidResourceHandle = 400


class cudaMemcpyKind(IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3
    cudaMemcpyDefault = 4


@dataclass
class cudaDeviceProp:
    name: bytes = b"Fake GPU (fasttts_cli.tools.fakes)"
    major: int = 9
    minor: int = 0
    totalGlobalMem: int = 16 << 30


@dataclass
class FakeDevice:
    """The state of the one fake GPU: allocations by address, streams, and copy counters."""

    allocations: dict[int, np.ndarray] = field(default_factory=dict)  # aligned address -> backing bytes
    streams: set[int] = field(default_factory=set)
    copies: Counter = field(default_factory=Counter)  # kind name -> number of copies
    copied_bytes: Counter = field(default_factory=Counter)  # kind name -> bytes
    device: int = 0
    limit_bytes: int = 16 << 30
    _next_stream: int = 1

    def allocated_bytes(self) -> int:
        return sum(a.nbytes - ALIGN for a in self.allocations.values())

    def malloc(self, size: int) -> int:
        if size < 0:
            raise ValueError(size)
        if self.allocated_bytes() + size > self.limit_bytes:
            raise MemoryError(size)
        raw = np.zeros(size + ALIGN, dtype=np.uint8)
        addr = raw.ctypes.data
        aligned = (addr + ALIGN - 1) // ALIGN * ALIGN
        self.allocations[aligned] = raw
        self._sizes[aligned] = size
        return aligned

    def __post_init__(self) -> None:
        self._sizes: dict[int, int] = {}

    def free(self, ptr: int) -> bool:
        if ptr not in self.allocations:
            return False
        del self.allocations[ptr]
        del self._sizes[ptr]
        return True

    def owner(self, ptr: int, nbytes: int) -> int | None:
        """The allocation holding [ptr, ptr + nbytes), or None."""
        for base, size in self._sizes.items():
            if base <= ptr and ptr + nbytes <= base + max(size, 0) + (0 if nbytes else 1):
                return base
        return None

    def is_device(self, ptr: int) -> bool:
        return any(base <= ptr < base + max(size, 1) for base, size in self._sizes.items())

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """The device bytes [ptr, ptr + nbytes) as a writable uint8 array (for the fake TensorRT)."""
        if nbytes == 0:
            return np.zeros(0, np.uint8)
        base = self.owner(ptr, nbytes)
        if base is None:
            raise ValueError(f"fake CUDA: {nbytes} bytes at {ptr:#x} are not inside one device allocation")
        raw = self.allocations[base]
        start = ptr - raw.ctypes.data
        return raw[start : start + nbytes]

    def reset_counters(self) -> None:
        self.copies.clear()
        self.copied_bytes.clear()


DEVICE = FakeDevice()


def reset() -> FakeDevice:
    """A fresh device (tests start from one)."""
    global DEVICE
    DEVICE = FakeDevice()
    return DEVICE


def _ok(*values: Any) -> tuple[Any, ...]:
    return (cudaError_t.cudaSuccess, *values)


def cudaSetDevice(device: int) -> tuple[cudaError_t]:
    if device != 0:
        return (cudaError_t.cudaErrorInvalidDevice,)
    DEVICE.device = device
    return _ok()


def cudaGetDeviceCount() -> tuple[cudaError_t, int]:
    return _ok(1)


def cudaGetDeviceProperties(device: int) -> tuple[cudaError_t, Any]:
    if device != 0:
        return (cudaError_t.cudaErrorInvalidDevice, None)
    return _ok(cudaDeviceProp())


def cudaMalloc(size: int) -> tuple[cudaError_t, int]:
    try:
        return _ok(DEVICE.malloc(int(size)))
    except (MemoryError, ValueError):
        return (cudaError_t.cudaErrorMemoryAllocation, 0)


def cudaFree(ptr: int) -> tuple[cudaError_t]:
    if int(ptr) == 0:
        return _ok()  # cudaFree(nullptr) is a no-op
    return _ok() if DEVICE.free(int(ptr)) else (cudaError_t.cudaErrorInvalidValue,)


def cudaStreamCreate() -> tuple[cudaError_t, int]:
    s = DEVICE._next_stream
    DEVICE._next_stream += 1
    DEVICE.streams.add(s)
    return _ok(s)


def cudaStreamDestroy(stream: int) -> tuple[cudaError_t]:
    if int(stream) not in DEVICE.streams:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    DEVICE.streams.discard(int(stream))
    return _ok()


def cudaStreamSynchronize(stream: int) -> tuple[cudaError_t]:
    # copies and executions complete when called: synchronizing is only checked for a valid handle
    if int(stream) not in DEVICE.streams and int(stream) != 0:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    return _ok()


def cudaDeviceSynchronize() -> tuple[cudaError_t]:
    return _ok()


def cudaMemcpyAsync(dst: int, src: int, count: int, kind: Any, stream: int = 0) -> tuple[cudaError_t]:
    dst, src, count = int(dst), int(src), int(count)
    kind = cudaMemcpyKind(int(kind))
    if stream and int(stream) not in DEVICE.streams:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    dev_dst = kind in (cudaMemcpyKind.cudaMemcpyHostToDevice, cudaMemcpyKind.cudaMemcpyDeviceToDevice)
    dev_src = kind in (cudaMemcpyKind.cudaMemcpyDeviceToHost, cudaMemcpyKind.cudaMemcpyDeviceToDevice)
    if kind == cudaMemcpyKind.cudaMemcpyDefault:
        dev_dst, dev_src = DEVICE.is_device(dst), DEVICE.is_device(src)
    for ptr, on_device in ((dst, dev_dst), (src, dev_src)):
        if count and on_device and DEVICE.owner(ptr, count) is None:
            return (cudaError_t.cudaErrorInvalidValue,)
        if count and not on_device and DEVICE.is_device(ptr):
            return (cudaError_t.cudaErrorInvalidValue,)
    if count:
        ctypes.memmove(dst, src, count)
    name = {(False, True): "H2D", (True, False): "D2H", (True, True): "D2D", (False, False): "H2H"}
    label = name[(dev_src, dev_dst)]
    DEVICE.copies[label] += 1
    DEVICE.copied_bytes[label] += count
    return _ok()


def cudaMemcpy(dst: int, src: int, count: int, kind: Any) -> tuple[cudaError_t]:
    return cudaMemcpyAsync(dst, src, count, kind, 0)
