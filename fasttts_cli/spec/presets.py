"""Presets: named TOML profiles of build-time and run-time settings.

Build-time keys (backend and precision per component, shape limits) are fixed when an engine is
built and recorded in its manifest; run-time keys (decoding, s2mel) may be changed at synthesis
time. Presets ship inside the installed package (`fasttts_cli/_presets`) and in the repository's
`presets/` folder; a user may also pass a path to their own TOML file.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from fasttts_cli.errors import InputError, UsageError
from fasttts_cli.spec import registry
from fasttts_cli.spec.text_files import parse_text_file

# The backend registry's lists (spec.registry is the one place they are kept).
COMPONENTS = registry.COMPONENTS
BACKENDS = registry.names()
PRECISIONS = registry.PRECISIONS


# Precisions whose weights are integers (ONNX Runtime quantization: MatMulNBits or dynamic int8).
INTEGER_PRECISIONS = ("int8", "int4")


@dataclass(frozen=True)
class ComponentSpec:
    backend: str = "onnxruntime-cpu"
    precision: str = "fp32"
    options: dict[str, Any] = field(default_factory=dict)  # e.g. block_size, accuracy_level


@dataclass(frozen=True)
class Limits:
    max_batch: int = 8
    max_text_tokens: int = 120
    max_mel_tokens: int = 1500
    max_ref_seconds: float = 15.0


@dataclass(frozen=True)
class DecodeOptions:
    """The preset's [decode] table (field names are the file's keys) and a request's overrides of it: the
    one decoding-settings type. The sampler takes it as is (`sampling.SamplingParams` adds only the
    engine's stop token); defaults are the original's."""

    do_sample: bool = True
    beams: int = 3
    top_k: int = 30
    top_p: float = 0.8
    temperature: float = 0.8
    repetition_penalty: float = 10.0
    length_penalty: float = 0.0
    max_tokens: int = 1500

    def validate(self) -> None:
        """ValueError naming the first key whose value no decoder can run."""
        if self.beams < 1:
            raise ValueError(f"beams must be >= 1, got {self.beams}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.do_sample and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {self.temperature}")


def coerce_value(value: Any, default: Any) -> Any:
    """The one check and conversion of a run-time key's value (a preset file's or a request's), by the
    type of the key's default; ValueError says what the value must be."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {value!r}")
        return value
    if isinstance(default, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"must be a number, got {value!r}")
        if isinstance(default, int) and int(value) != value:
            raise ValueError(f"must be an integer, got {value!r}")
        return type(default)(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise ValueError(f"must be a string, got {value!r}")
    return value


@dataclass(frozen=True)
class S2MelOptions:
    steps: int = 25
    cfg_rate: float = 0.7
    schedule: str = "uniform"
    cache_level: str = "T0"
    # Lines per s2mel (DiT) and vocoder call after a GPT batch; 0 = the whole batch. On CPU one line at a
    # time is fastest: no padding to the longest line, and the DiT's (B, heads, T, T) attention scores
    # stay small (8 equal lines as one batch took 37% longer per step than one by one).
    rows_per_call: int = 0


@dataclass(frozen=True)
class StreamOptions:
    """The preset's [stream] table: how a streamed line is cut (`indextts2.streaming`). Sizes are GPT codes
    (IndexTTS-2: 1.72 mel frames, ~20 ms each). Not part of `run_keys`: a streamed line is never cached,
    so these keys change no cache key. `beams`: the beams a streamed line samples with (codes are final
    as they are drawn only with one beam; 0 keeps decode.beams, and then audio starts once the line's
    codes are all out)."""

    first_chunk_codes: int = 12  # the first chunk, smaller: first audio comes early
    chunk_codes: int = 40  # every later chunk
    context_codes: int = 24  # codes before a chunk that s2mel sees again (>= overlap_codes)
    overlap_codes: int = 4  # the cross-fade between two chunks (Hann, amplitude-complementary)
    beams: int = 1

    def validate(self) -> None:
        """ValueError naming the first key no streamer can run."""
        if self.first_chunk_codes < 1 or self.chunk_codes < 1:
            raise ValueError("first_chunk_codes and chunk_codes must be >= 1")
        if self.overlap_codes < 0 or self.context_codes < self.overlap_codes:
            raise ValueError(
                f"context_codes ({self.context_codes}) must be >= overlap_codes ({self.overlap_codes}) >= 0"
            )
        if self.overlap_codes >= min(self.first_chunk_codes, self.chunk_codes):
            raise ValueError("overlap_codes must be smaller than first_chunk_codes and chunk_codes")
        if self.beams < 0:
            raise ValueError(f"beams must be >= 0, got {self.beams}")


@dataclass(frozen=True)
class Preset:
    name: str
    description: str = ""
    components: dict[str, ComponentSpec] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    decode: DecodeOptions = field(default_factory=DecodeOptions)
    s2mel: S2MelOptions = field(default_factory=S2MelOptions)
    source: Path | None = None
    stream: StreamOptions = field(default_factory=StreamOptions)

    def build_keys(self) -> dict[str, Any]:
        """What an engine records at build time; a run-time preset must agree on these."""
        return {
            "components": {k: asdict(v) for k, v in sorted(self.components.items())},
            "limits": asdict(self.limits),
        }

    def run_keys(self) -> dict[str, Any]:
        return {"decode": asdict(self.decode), "s2mel": asdict(self.s2mel)}

    def with_run_keys(
        self, decode: dict[str, Any] | None = None, s2mel: dict[str, Any] | None = None
    ) -> Preset:
        return replace(
            self,
            decode=replace(self.decode, **(decode or {})),
            s2mel=replace(self.s2mel, **(s2mel or {})),
        )


def preset_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent.parent
    return [p for p in (here / "_presets", here.parent / "presets") if p.is_dir()]


def available_presets() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in preset_dirs():
        for p in sorted(d.glob("*.toml")):
            found.setdefault(p.stem, p)
    return found


def load_preset(name_or_path: str | Path) -> Preset:
    """Load a preset by name (shipped) or by path to a TOML file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise InputError(p, "preset file not found")
        return parse_preset(p)
    shipped = available_presets()
    if str(name_or_path) not in shipped:
        raise UsageError(
            f"--preset: unknown preset {name_or_path!r}",
            hint=f"choose one of: {', '.join(sorted(shipped)) or '(none found)'}, or pass a .toml path",
        )
    return parse_preset(shipped[str(name_or_path)])


def _section(path: Path, data: dict[str, Any], key: str, cls: type) -> Any:
    raw = data.get(key, {})
    if not isinstance(raw, dict):
        raise InputError(path, f"[{key}] must be a table")
    allowed = {f.name: f for f in fields(cls)}
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k not in allowed:
            raise InputError(path, f"unknown key {key}.{k}", hint=f"allowed: {', '.join(allowed)}")
        try:
            out[k] = coerce_value(v, getattr(cls(), k))
        except ValueError as e:
            raise InputError(path, f"{key}.{k} {e}") from None
    return cls(**out)


def parse_preset(path: Path) -> Preset:
    data = parse_text_file(path, tomllib.loads, tomllib.TOMLDecodeError, "TOML")
    known = {"name", "description", "components", "limits", "decode", "s2mel", "stream"}
    for k in data:
        if k not in known:
            raise InputError(
                path, f"unknown top-level key {k!r}", hint=f"allowed: {', '.join(sorted(known))}"
            )
    comps: dict[str, ComponentSpec] = {}
    for cname, spec in (data.get("components") or {}).items():
        if cname not in COMPONENTS:
            raise InputError(
                path, f"unknown component components.{cname}", hint=f"allowed: {', '.join(COMPONENTS)}"
            )
        if not isinstance(spec, dict):
            raise InputError(path, f"components.{cname} must be a table")
        backend = spec.get("backend", "onnxruntime-cpu")
        precision = spec.get("precision", "fp32")
        if backend not in registry.BACKENDS:
            raise InputError(
                path, f"components.{cname}.backend = {backend!r}", hint=f"allowed: {', '.join(BACKENDS)}"
            )
        if precision not in PRECISIONS:
            raise InputError(
                path,
                f"components.{cname}.precision = {precision!r}",
                hint=f"allowed: {', '.join(PRECISIONS)}",
            )
        extra = {k: v for k, v in spec.items() if k not in ("backend", "precision")}
        comps[cname] = ComponentSpec(backend=backend, precision=precision, options=extra)
    s2 = _section(path, data, "s2mel", S2MelOptions)
    if s2.schedule not in ("uniform", "sway"):
        raise InputError(path, f"s2mel.schedule = {s2.schedule!r}", hint="allowed: uniform, sway")
    if s2.rows_per_call < 0:
        raise InputError(
            path, f"s2mel.rows_per_call = {s2.rows_per_call}", hint="allowed: 0 (the whole batch) or more"
        )
    dit = comps.get("dit")
    if dit is not None and dit.precision in INTEGER_PRECISIONS and s2.rows_per_call != 1:
        # Dynamic int8 scales the activations once per call: lines sharing a call would change
        # each other's audio.
        raise InputError(
            path,
            f"s2mel.rows_per_call = {s2.rows_per_call} with components.dit.precision = {dit.precision!r}",
            hint="an integer DiT needs rows_per_call = 1 (one line per call), or make the DiT fp32",
        )
    dec = _section(path, data, "decode", DecodeOptions)
    try:
        dec.validate()
    except ValueError as e:
        raise InputError(path, f"decode.{e}") from None
    stream = _section(path, data, "stream", StreamOptions)
    try:
        stream.validate()
    except ValueError as e:
        raise InputError(path, f"stream: {e}") from None
    return Preset(
        name=str(data.get("name", path.stem)),
        description=str(data.get("description", "")),
        components=comps,
        limits=_section(path, data, "limits", Limits),
        decode=dec,
        s2mel=s2,
        source=path,
        stream=stream,
    )
