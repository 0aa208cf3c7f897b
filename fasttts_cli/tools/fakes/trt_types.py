"""Enums, dims, logger and allocator base of the fake TensorRT (tools/fakes/tensorrt.py), with the real
module's names and values (include/NvInferRuntimeBase.h DataType, NvInferRuntime.h TensorIOMode and
TensorLocation)."""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import Any

import numpy as np

__version__ = "10.99.0-fake"
MAGIC = b"FASTTTS-FAKE-TRT-PLAN\n"


class DataType(IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8
    INT4 = 9


float32, float16, int8, int32, int64 = (
    DataType.FLOAT,
    DataType.HALF,
    DataType.INT8,
    DataType.INT32,
    DataType.INT64,
)
uint8 = DataType.UINT8
_NP = {
    DataType.FLOAT: np.float32,
    DataType.HALF: np.float16,
    DataType.INT8: np.int8,
    DataType.INT32: np.int32,
    DataType.INT64: np.int64,
    DataType.BOOL: np.bool_,
    DataType.UINT8: np.uint8,
}
_ONNX_TO_TRT = {1: DataType.FLOAT, 10: DataType.HALF, 3: DataType.INT8, 6: DataType.INT32, 7: DataType.INT64,
                9: DataType.BOOL, 2: DataType.UINT8}  # fmt: skip


def nptype(trt_type: DataType) -> type:
    if trt_type in _NP:
        return _NP[trt_type]
    raise TypeError("Could not resolve TensorRT datatype to an equivalent numpy datatype.")


class TensorIOMode(IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class TensorLocation(IntEnum):
    DEVICE = 0
    HOST = 1


class MemoryPoolType(IntEnum):
    WORKSPACE = 0


class NetworkDefinitionCreationFlag(IntEnum):
    STRONGLY_TYPED = 0  # deprecated in 11 (always on), kept for API compatibility


class Dims(tuple):
    """trt.Dims: a sequence of ints."""


class Logger:
    class Severity(IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = (
        Severity.INTERNAL_ERROR, Severity.ERROR, Severity.WARNING, Severity.INFO, Severity.VERBOSE,
    )  # fmt: skip

    def __init__(self, min_severity: Any = Severity.WARNING) -> None:
        self.min_severity = min_severity
        self.messages: list[str] = []

    def log(self, severity: Any, msg: str) -> None:
        self.messages.append(msg)
        if int(severity) <= int(self.min_severity):
            print(f"[fake TensorRT] {msg}", file=sys.stderr)


class IOutputAllocator:
    """Base class of application output allocators (the real one must be __init__-ed too)."""

    def __init__(self) -> None:
        self._fake_initialized = True

    def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int | None:
        return None

    def notify_shape(self, tensor_name: str, shape: Dims) -> None:
        raise NotImplementedError
