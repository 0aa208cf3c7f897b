"""TensorRT engines (`.plan`) from our ONNX components, with the Python builder.

Written for **strongly typed** networks: the precision is carried by the ONNX graph (fp32, or fp16 with
fp32 islands from `fp16.py`), and no builder precision flag is set. TensorRT 10 honours the
`STRONGLY_TYPED` creation flag; TensorRT 11 removed weak typing (`BuilderFlag.FP16` and friends) and
types every network strongly, so the same code builds on both.

Optimization profiles come from the preset's `[limits]` and the model constants in the manifest
(`axis_ranges`): one profile per component, every named dynamic axis given (min, opt, max). A timing
cache persists across builds (`timing_cache`), so rebuilding on the same GPU takes a fraction of the
first build. `tensorrt` is imported only inside the functions that need a GPU; profile shapes and
manifest entries are plain Python and tested on CPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.errors import FastTTSError, MissingDependencyError
from fasttts_cli.spec.engine_folder import ComponentEntry, file_sha256
from fasttts_cli.spec.presets import ComponentSpec, Limits

TIMING_CACHE = "tensorrt.timing_cache"

# Frame rates that turn the preset's seconds/tokens limits into axis lengths.
W2V_FPS = 50  # w2v-BERT features (16 kHz, 10 ms fbank stacked by 2), codec and conditioner frames
FBANK_FPS = 100  # CAMPPlus 80-bin Kaldi fbank
CODE_TO_FRAMES = 1.72  # s2mel length regulator: floor(1.72 n) mel frames for n codes
# The GPT trunk's prefill: GPTDecoder.forward feeds at most this many new tokens per call (its `chunk`),
# so the profile's `new` axis stops there instead of at the full length.
PREFILL_CHUNK = 256
# One layer's attention scores, rows x heads x new x total in fp32, at the profile's maxima: TensorRT
# sizes activation memory for the profile's max shapes, and a 48-row full-length prefill was ~10 GB.
TRUNK_SCORES_BUDGET = 2 << 30


class TensorRTBuildError(FastTTSError):
    """A TensorRT engine could not be built."""


Shape = tuple[int, ...]


@dataclass(frozen=True)
class AxisRange:
    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not (0 <= self.min <= self.opt <= self.max and self.max >= 1):
            raise ValueError(f"axis range must satisfy 0 <= min <= opt <= max, max >= 1; got {self}")


@dataclass(frozen=True)
class Profile:
    """input name -> (min, opt, max) shapes."""

    shapes: dict[str, tuple[Shape, Shape, Shape]] = field(default_factory=dict)

    def to_json(self) -> dict[str, list[list[int]]]:
        return {k: [list(s) for s in v] for k, v in self.shapes.items()}


def _r(lo: int, opt: int, hi: int) -> AxisRange:
    hi = max(1, hi)
    lo = max(1, min(lo, hi))
    return AxisRange(lo, max(lo, min(opt, hi)), hi)


def axis_ranges(
    component: str, limits: Limits, constants: Mapping[str, Any] | None = None
) -> dict[str, AxisRange]:
    """Ranges of the named dynamic axes of one exported component (names as export.py writes them),
    from the preset limits. `constants` is the manifest `config` (s2mel sr/hop, gpt num_latents)."""
    c = dict(constants or {})
    s2 = c.get("s2mel", {})
    sr, hop = int(s2.get("sr", 22050)), int(s2.get("hop_length", 256))
    n_conds = int(c.get("gpt", {}).get("num_latents", 32)) + 2
    b = limits.max_batch
    ref_w2v = math.ceil(limits.max_ref_seconds * W2V_FPS) + 2
    ref_mel = math.ceil(limits.max_ref_seconds * sr / hop) + 2
    # IndexTTS-2.5 decodes n codes to 2n frames before the 1.72 stretch (manifest s2mel.code_upsample)
    up = int(s2.get("code_upsample", 1))
    gen_mel = math.floor(CODE_TO_FRAMES * up * limits.max_mel_tokens) + 1
    batch = _r(1, max(1, b // 2), b)
    if component in ("w2v_bert", "codec_quantize"):
        return {"batch": _r(1, 1, 2), "time": _r(8, ref_w2v // 2, ref_w2v)}
    if component in ("speaker_conditioner", "emotion_conditioner"):
        return {"batch": _r(1, 1, 2), "time": _r(5, ref_w2v // 2, ref_w2v)}
    if component == "campplus":
        frames = math.ceil(limits.max_ref_seconds * FBANK_FPS) + 2
        return {"batch": _r(1, 1, 2), "time": _r(8, frames // 2, frames)}
    if component in ("codec_vq2emb", "codec_decode"):  # codes (batch, time); 2.5's decode too
        return {"batch": batch, "time": _r(1, 200, limits.max_mel_tokens + 1)}
    if component == "gpt_trunk":
        return trunk_ranges(limits, n_conds, int(c.get("gpt", {}).get("heads", 20)))
    if component == "s2mel_content":
        # `cond` has max(ylens) frames (the target frames, an input): a size from input values, so no
        # profile axis (the session gives it an output allocator; onnx_shapes.VALUE_DEPENDENT_OUTPUTS);
        # `ylens` (batch,) rides on the batch axis
        return {"batch": batch, "time": _r(1, 200, limits.max_mel_tokens + 1)}
    if component == "length_regulator":
        # `y` has max(y_lens) frames: value-dependent like s2mel_content's `cond`
        if up > 1:  # 2.5 also stretches a batch's decoded codes (2n frames each) with it
            return {
                "batch": batch,
                "time": _r(2, ref_w2v // 2, max(ref_w2v, up * (limits.max_mel_tokens + 1))),
            }
        return {"batch": _r(1, 1, 2), "time": _r(2, ref_w2v // 2, ref_w2v)}
    if component == "dit_cfg_step":
        t = ref_mel + gen_mel
        return {"batch": _r(2, 2, 2 * b), "time": _r(8, min(t, 600), t)}  # cond + uncond rows
    if component == "bigvgan":
        return {"batch": batch, "frames": _r(2, 344, gen_mel)}  # wav's samples follow: hop * frames
    raise TensorRTBuildError(f"no optimization profile is defined for component {component!r}")


def trunk_ranges(limits: Limits, n_conds: int, heads: int) -> dict[str, AxisRange]:
    """The GPT trunk's axes. Rows: up to 3 beams per line in decode steps; new tokens: one per step, at
    most PREFILL_CHUNK in a prefill or latent pass, and fewer if rows x heads x new x total fp32 scores
    would pass TRUNK_SCORES_BUDGET (then the build fails rather than the decoder's chunked calls)."""
    prefix = n_conds + limits.max_text_tokens + 3
    total = prefix + limits.max_mel_tokens + 2
    rows = limits.max_batch * 3
    fits = TRUNK_SCORES_BUDGET // (rows * max(1, heads) * total * 4)
    new = min(PREFILL_CHUNK, total)
    if fits < new:
        raise TensorRTBuildError(
            f"gpt_trunk profile: {rows} rows x {heads} heads x {new} new x {total} total fp32 attention "
            f"scores exceed {TRUNK_SCORES_BUDGET >> 20} MiB",
            hint="lower [limits] max_batch or max_mel_tokens in the preset",
        )
    return {
        "batch": _r(1, max(1, limits.max_batch // 2), rows),
        "new": _r(1, 1, new),
        "past": AxisRange(0, prefix, total),  # 0 = prefill with an empty cache
        "total": _r(1, prefix + 1, total),
    }


def scores_bytes(ranges: Mapping[str, AxisRange], heads: int) -> int:
    """One layer's fp32 attention scores at the trunk profile's maxima."""
    return ranges["batch"].max * heads * ranges["new"].max * ranges["total"].max * 4


def profile_for(
    component: str,
    inputs: Mapping[str, Sequence[Any]],
    limits: Limits,
    constants: Mapping[str, Any] | None = None,
) -> Profile:
    """The optimization profile of one component: `inputs` is the manifest's io description
    (name -> dims, each an int or an axis name)."""
    ranges = axis_ranges(component, limits, constants)
    used = {str(d) for dims in inputs.values() for d in dims if not (isinstance(d, int) and d > 0)}
    unused = sorted(set(ranges) - used)
    if unused:  # a range on an axis no input has would never reach TensorRT
        raise TensorRTBuildError(
            f"component {component!r}: profile axes {unused} match no input axis "
            f"(inputs: { {k: list(v) for k, v in inputs.items()} })"
        )
    shapes = {}
    for name, dims in inputs.items():
        lo, opt, hi = [], [], []
        for d in dims:
            if isinstance(d, int) and d > 0:
                lo.append(d)
                opt.append(d)
                hi.append(d)
                continue
            r = ranges.get(str(d))
            if r is None:
                raise TensorRTBuildError(
                    f"component {component!r}: input {name} axis {d!r} has no range (known: {sorted(ranges)})"
                )
            lo.append(r.min)
            opt.append(r.opt)
            hi.append(r.max)
        shapes[name] = (tuple(lo), tuple(opt), tuple(hi))
    return Profile(shapes)


# ------------------------------------------------------------------------------------------ manifest


def plan_name(component: str) -> str:
    return f"{component}.plan"


def plan_entry(onnx_entry: ComponentEntry, plan_path: Path, precision: str) -> ComponentEntry:
    """The manifest entry of a built plan: same io as its ONNX source, backend tensorrt."""
    return ComponentEntry(
        file=plan_path.name,
        backend="tensorrt",
        precision=precision,
        inputs=dict(onnx_entry.inputs),
        outputs=dict(onnx_entry.outputs),
        sha256=file_sha256(plan_path),
    )


@dataclass(frozen=True)
class BuildInfo:
    """What the manifest `config["tensorrt"][component]` records: engines are specific to the GPU and
    the TensorRT version, so the runtime refuses a plan built elsewhere with a message naming both."""

    tensorrt_version: str
    gpu: str
    compute_capability: str
    strongly_typed: bool
    profile: dict[str, list[list[int]]]
    workspace_gb: float
    opt_level: int
    source_onnx_sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------ build


def _trt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as e:
        raise MissingDependencyError(
            f"tensorrt is not importable ({e})",
            hint="pip install 'fasttts-cli[gpu]' on a machine with an NVIDIA GPU",
        ) from None
    return trt


def _strongly_typed_flags(trt: Any) -> int:
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return 0 if flag is None else 1 << int(flag)


def build_plan(
    onnx_path: Path | str,
    plan_path: Path | str,
    profile: Profile,
    *,
    spec: ComponentSpec | None = None,
    timing_cache: Path | str | None = None,
) -> BuildInfo:
    """Parse `onnx_path`, build a strongly typed engine with `profile`, write it to `plan_path`."""
    trt = _trt()
    spec = spec or ComponentSpec("tensorrt", "fp32")
    workspace_gb = float(spec.options.get("workspace_gb", 4))
    opt_level = int(spec.options.get("opt_level", 3))
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(_strongly_typed_flags(trt))
    parser = trt.OnnxParser(network, logger)
    onnx_path = Path(onnx_path)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise TensorRTBuildError(f"{onnx_path}: TensorRT cannot parse it: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gb * (1 << 30)))
    config.builder_optimization_level = opt_level
    cache_path = Path(timing_cache) if timing_cache else None
    cache = config.create_timing_cache(
        cache_path.read_bytes() if cache_path and cache_path.is_file() else b""
    )
    config.set_timing_cache(cache, ignore_mismatch=False)
    prof = builder.create_optimization_profile()
    names = {network.get_input(i).name for i in range(network.num_inputs)}
    unknown = sorted(set(profile.shapes) - names)
    if unknown:
        raise TensorRTBuildError(
            f"{onnx_path}: the profile names {unknown}, which are not inputs of the graph"
        )
    for name, (lo, opt, hi) in profile.shapes.items():
        prof.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(prof)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise TensorRTBuildError(f"{onnx_path}: TensorRT build failed (see the log above)")
    plan_path = Path(plan_path)
    tmp = plan_path.with_name(plan_path.name + ".tmp")
    tmp.write_bytes(bytes(serialized))
    os.replace(tmp, plan_path)
    if cache_path is not None:
        ctmp = cache_path.with_name(cache_path.name + ".tmp")
        ctmp.write_bytes(bytes(config.get_timing_cache().serialize()))
        os.replace(ctmp, cache_path)
    gpu, cc = _gpu_name()
    return BuildInfo(
        tensorrt_version=trt.__version__,
        gpu=gpu,
        compute_capability=cc,
        strongly_typed=True,
        profile=profile.to_json(),
        workspace_gb=workspace_gb,
        opt_level=opt_level,
        source_onnx_sha256=file_sha256(onnx_path),
    )


def _gpu_name() -> tuple[str, str]:  # pragma: no cover - needs a GPU
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]
        except ImportError:
            return "unknown", "unknown"
    err, props = cudart.cudaGetDeviceProperties(0)
    if int(err) != 0:
        return "unknown", "unknown"
    name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
    return name.rstrip("\x00"), f"{props.major}.{props.minor}"


def build_component(
    folder: Path,
    component: str,
    onnx_entry: ComponentEntry,
    spec: ComponentSpec,
    limits: Limits,
    constants: Mapping[str, Any] | None = None,
) -> tuple[ComponentEntry, BuildInfo]:
    """Build `<component>.plan` next to its ONNX file in an engine folder (the ONNX already carries
    the precision: fp16.convert_file ran before for fp16 components). Refused first when an output's
    size comes from input values and the component does not declare it (onnx_shapes)."""
    from fasttts_cli.build.onnx_shapes import check_tensorrt_outputs

    problems = check_tensorrt_outputs(folder / onnx_entry.file, component)
    if problems:
        raise TensorRTBuildError("; ".join(problems))
    prof = profile_for(component, onnx_entry.inputs, limits, constants)
    plan = folder / plan_name(component)
    info = build_plan(folder / onnx_entry.file, plan, prof, spec=spec, timing_cache=folder / TIMING_CACHE)
    return plan_entry(onnx_entry, plan, spec.precision), info
