"""A line's run-time settings: the preset's `decode` and `s2mel` run keys with a request's overrides
(`SynthRequest.options`, same names, a few aliases from the original's arguments)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.spec.presets import DecodeOptions, Preset, S2MelOptions, coerce_value

_ALIASES = {
    "num_beams": "beams",
    "max_mel_tokens": "max_tokens",
    "diffusion_steps": "steps",
    "s2mel_steps": "steps",
    "inference_cfg_rate": "cfg_rate",
}
_DECODE_KEYS = {f.name for f in fields(DecodeOptions)}
_S2MEL_KEYS = {"steps", "cfg_rate", "schedule"}


@dataclass(frozen=True)
class LineOptions:
    """The effective run-time settings of one line."""

    decode: DecodeOptions
    s2mel: S2MelOptions

    def sampling(self, stop_token: int, max_codes: int) -> SamplingParams:
        p = SamplingParams.from_options(self.decode, stop_token)
        return replace(p, max_tokens=min(p.max_tokens, max_codes))


def line_options(preset: Preset, overrides: Mapping[str, Any]) -> LineOptions:
    """The preset's run keys with a request's overrides; ValueError names a bad key or value."""
    dec: dict[str, Any] = {}
    s2: dict[str, Any] = {}
    for raw_key, value in overrides.items():
        key = _ALIASES.get(raw_key, raw_key)
        if key in _S2MEL_KEYS:
            target, default = s2, getattr(preset.s2mel, key)
        elif key in _DECODE_KEYS:
            target, default = dec, getattr(preset.decode, key)
        else:
            allowed = sorted(_DECODE_KEYS | _S2MEL_KEYS)
            raise ValueError(f"unknown synthesis option {raw_key!r} (allowed: {', '.join(allowed)})")
        try:
            target[key] = coerce_value(value, default)
        except ValueError as e:
            raise ValueError(f"option {raw_key} {e}") from None
    opts = LineOptions(replace(preset.decode, **dec), replace(preset.s2mel, **s2))
    opts.decode.validate()
    s = opts.s2mel
    if s.steps < 1:
        raise ValueError(f"steps must be >= 1, got {s.steps}")
    if s.schedule not in ("uniform", "sway"):
        raise ValueError(f"schedule must be uniform or sway, got {s.schedule!r}")
    return opts
