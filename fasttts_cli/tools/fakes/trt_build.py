"""The build side of the fake TensorRT: network, ONNX parser, profile, builder config and a Builder whose
"plan" is JSON (io, host locations, profile, build/onnx_shapes' output-dim analysis) followed by the ONNX
graph that the fake runtime (tools/fakes/tensorrt.py) runs."""

from __future__ import annotations

import json
from typing import Any

from fasttts_cli.tools.fakes.trt_types import _ONNX_TO_TRT, MAGIC, DataType, Dims, Logger, MemoryPoolType


class ITensor:
    def __init__(self, name: str, shape: list[int], dtype: DataType) -> None:
        self.name, self.shape, self.dtype = name, Dims(shape), dtype


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.onnx: bytes = b""
        self._inputs: list[ITensor] = []
        self._outputs: list[ITensor] = []

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_input(self, i: int) -> ITensor:
        return self._inputs[i]

    def get_output(self, i: int) -> ITensor:
        return self._outputs[i]


class OnnxParser:
    def __init__(self, network: INetworkDefinition, logger: Logger) -> None:
        self.network, self.logger = network, logger
        self._errors: list[str] = []

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, i: int) -> str:
        return self._errors[i]

    def parse_from_file(self, path: str) -> bool:
        import onnx

        try:
            model = onnx.load(path, load_external_data=True)
        except Exception as e:  # onnx raises several types for a bad file
            self._errors.append(f"cannot read {path}: {e}")
            return False
        contrib = sorted({n.op_type for n in model.graph.node if n.domain not in ("", "ai.onnx")})
        if contrib:  # TensorRT's parser knows only standard ops (and its plugins)
            self._errors.append(f"No importer registered for op: {contrib[0]}")
            return False
        init = {i.name for i in model.graph.initializer}

        def tensor(vi: Any) -> ITensor:
            t = vi.type.tensor_type
            dims = [int(d.dim_value) if d.dim_value else -1 for d in t.shape.dim]
            return ITensor(vi.name, dims, _ONNX_TO_TRT.get(t.elem_type, DataType.FLOAT))

        self.network._inputs = [tensor(i) for i in model.graph.input if i.name not in init]
        self.network._outputs = [tensor(o) for o in model.graph.output]
        self.network.onnx = model.SerializeToString()
        return True


class IOptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[list[int], list[int], list[int]]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        lo, mid, hi = list(min), list(opt), list(max)
        if not (len(lo) == len(mid) == len(hi)) or any(
            a > b or b > c for a, b, c in zip(lo, mid, hi, strict=True)
        ):
            raise ValueError(f"profile for {input}: need min <= opt <= max of one rank")
        self.shapes[input] = (lo, mid, hi)


class ITimingCache:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def serialize(self) -> bytes:
        return self.data or b"fake-timing-cache"


class IBuilderConfig:
    def __init__(self) -> None:
        self.profiles: list[IOptimizationProfile] = []
        self.builder_optimization_level = 3
        self.pool_limits: dict[MemoryPoolType, int] = {}
        self._cache = ITimingCache(b"")

    def set_memory_pool_limit(self, pool: MemoryPoolType, size: int) -> None:
        self.pool_limits[pool] = int(size)

    def create_timing_cache(self, serialized: bytes) -> ITimingCache:
        return ITimingCache(serialized)

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        self._cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache:
        return self._cache

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1


class Builder:
    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes | None:
        from fasttts_cli.build.onnx_shapes import host_inputs, output_dims

        prof = config.profiles[0].shapes if config.profiles else {}
        for t in network._inputs:
            if any(d < 0 for d in t.shape) and t.name not in prof:
                self.logger.log(Logger.ERROR, f"{t.name}: dynamic input without an optimization profile")
                return None
        for name in prof:
            if name not in {t.name for t in network._inputs}:
                self.logger.log(Logger.ERROR, f"optimization profile names {name}, which is not an input")
                return None
        import onnx

        model = onnx.load_from_string(network.onnx)
        header = {
            "inputs": [[t.name, int(t.dtype), list(t.shape)] for t in network._inputs],
            "outputs": [[t.name, int(t.dtype), list(t.shape)] for t in network._outputs],
            "host": sorted(host_inputs(model)),
            "profile": {k: [list(v) for v in s] for k, s in prof.items()},
            "dims": {k: [d.to_json() for d in v] for k, v in output_dims(model).items()},
            "input_dims": {i.name: [d.dim_param or int(d.dim_value) for d in i.type.tensor_type.shape.dim]
                           for i in model.graph.input},
        }  # fmt: skip
        head = json.dumps(header).encode()
        return MAGIC + len(head).to_bytes(8, "little") + head + network.onnx
