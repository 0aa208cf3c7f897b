"""`fasttts bench`'s output: the plain-text table and the JSON form of its result."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table: ours per batch size next to eager (per line, batch 1). Accepts the result as
    returned or after a JSON round trip (integer keys turned into strings)."""
    result = _int_keys(result)
    ours, eager = result["ours"], result.get("eager")
    bs = list(ours["batches"])
    beams = sorted({int(k) for row in ours["batches"].values() for k in row["ms_per_token"]})
    cols = [f"ours b={b}" for b in bs] + (["eager (1 line)"] if eager else [])

    def cell(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    rows: list[tuple[str, list[str]]] = []

    def add(
        label: str, fn: Callable[[dict[str, Any]], float | None], fmt: str, eager_too: bool = True
    ) -> None:
        vals = [cell(fn(ours["batches"][b]), fmt) for b in bs]
        if eager:
            vals.append(cell(fn(eager), fmt) if eager_too else "-")
        rows.append((label, vals))

    for label, key in (
        ("voice prep, first (s)", "voice_prep_cold_s"),
        ("voice prep, again (s)", "voice_prep_s"),
    ):
        rows.append(
            (
                label,
                [cell(ours.get(key), ".2f")]
                + [""] * (len(bs) - 1)
                + ([cell(eager.get(key), ".2f")] if eager else []),
            )
        )
    add("prefill + 1 token (s)", lambda r: r["prefill_s"], ".3f")
    for k in beams:
        add(f"ms/token, {k} beam{'s' if k > 1 else ''}", lambda r, k=k: r["ms_per_token"][k], ".1f")
    for k in beams:
        add(
            f"ms/audio s, {k} beam{'s' if k > 1 else ''}",
            lambda r, k=k: r.get("ms_per_audio_s", {}).get(k),
            ".0f",
        )
    add("latent pass (s)", lambda r: r["latent_s"], ".3f")
    add("codec decode (s)", lambda r: r.get("codec_decode_s"), ".3f")
    add("s2mel content (s)", lambda r: r["s2mel_content_s"], ".3f")
    add("s2mel per step (s)", lambda r: r["s2mel_step_s"], ".3f")
    add("  (CFM frames)", lambda r: r["cfm_frames"], "d")
    add("vocoder (s)", lambda r: r["vocoder_s"], ".3f")
    add("audio (s)", lambda r: r["audio_s"], ".2f")
    for k in beams:
        add(f"RTF, {k} beam{'s' if k > 1 else ''}", lambda r, k=k: r["rtf"][k], ".2f")
        add(f"lines/s, {k} beam{'s' if k > 1 else ''}", lambda r, k=k: r["lines_per_s"][k], ".3f")
    if eager:
        for k in beams:
            rows.append(
                (
                    f"speed-up vs eager, {k} beam{'s' if k > 1 else ''}",
                    [
                        cell(eager["batch_s"][k] * b / ours["batches"][b]["batch_s"][k], ".2f") + "x"
                        for b in bs
                    ]
                    + ["1.00x"],
                )
            )
        k3 = max(beams)
    if eager and 1 in beams and k3 > 1:
        rows.append(
            (
                f"{k3}-beam / 1-beam token cost",
                [
                    cell(
                        ours["batches"][b]["ms_per_token"][k3] / ours["batches"][b]["ms_per_token"][1], ".2f"
                    )
                    for b in bs
                ]
                + [cell(eager["ms_per_token"][k3] / eager["ms_per_token"][1], ".2f")],
            )
        )
    rows.append(
        (
            "peak RSS (MB)",
            [cell(ours["peak_rss_mb"], ".0f")]
            + [""] * (len(bs) - 1)
            + ([cell(eager["peak_rss_mb"], ".0f")] if eager else []),
        )
    )
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(c), *(len(r[1][i]) for r in rows)) for i, c in enumerate(cols)]
    lines = [" ".join([" " * w0, *(c.rjust(w) for c, w in zip(cols, widths, strict=True))])]
    for label, vals in rows:
        lines.append(" ".join([label.ljust(w0), *(v.rjust(w) for v, w in zip(vals, widths, strict=True))]))
    o = result["options"]
    lines.append(
        f"model {ours.get('model', 'indextts2')}, "
        f"tokens/line {ours['tokens']}, text tokens {o['text_tokens']}, reference {o['ref_seconds']} s, "
        f"s2mel {ours['s2mel_steps']} steps (per-step time from {o['s2mel_steps_timed']} timed steps), "
        f"cpus {result['machine']['cpus']}, threads {o['threads'] or 'all'}"
        + (f", median of {o['rounds']} rounds (ours, eager, alternating)" if o.get("rounds", 1) > 1 else "")
        + (
            f"; eager voice prep runs all {eager['w2v_layers_run']} w2v-BERT layers as the original does "
            "(ours stops at the one it reads)"
            + (
                f", {eager['w2v_passes']} passes (the speaker twice, as infer_v2_5 does)"
                if eager.get("w2v_passes", 2) > 2
                else ""
            )
            if eager and eager.get("w2v_layers_run")
            else ""
        )
    )
    if "build" in result:
        b = result["build"]
        lines.append(
            f"random checkpoint {b['checkpoint_gb']} GB written in {b['write_checkpoint_s']} s; "
            f"load + export {b['load_and_export_s']} s (engine {b['engine_gb']} GB), "
            f"build peak RSS {b['peak_rss_mb']} MB"
        )
    return "\n".join(lines)


def _int_keys(x: Any) -> Any:
    if isinstance(x, dict):
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): _int_keys(v) for k, v in x.items()}
    return x


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=_json_default)
