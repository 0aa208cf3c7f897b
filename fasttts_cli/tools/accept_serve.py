"""The serving table in the GPU acceptance (tools/accept_torch.py): `fasttts serve` on the lent GPU, first
audio and throughput at 1, 4 and 16 clients, streaming vs whole, server vs processes (tools/serve_bench.py,
the program benchmarks/serve_bench.py runs on CPU engines). Goal of issue 33: first audio under 150 ms at
one client on an H200.

The engine is a full-size random-weight checkpoint on the torch backend (gpu-torch-fp16, max_tokens 200:
random weights rarely stop, so every line is 4 s), the voice a synthetic one: timing, not audio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

GOAL_FIRST_AUDIO_S = 0.150


def _voice(path: Path, sr: int = 24000, seconds: float = 3.0) -> Path:
    import soundfile as sf

    t = np.arange(int(sr * seconds)) / sr
    x = 0.2 * sum(np.sin(2 * np.pi * k * 140.0 * t) / k for k in range(1, 10))
    sf.write(str(path), (x * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t) ** 2)).astype(np.float32), sr)
    return path


def _preset(work: Path, max_tokens: int) -> Path:
    from fasttts_cli.spec.presets import available_presets

    text = available_presets()["gpu-torch-fp16"].read_text(encoding="utf-8")
    out = work / "serve-bench.toml"
    out.write_text(text.replace("max_tokens = 1500", f"max_tokens = {max_tokens}"), encoding="utf-8")
    return out


def run_serve_checks(table: Any, work: Path, mode: str, *, clients: tuple[int, ...] = (1, 4, 16)) -> None:
    """Checks: one per table row (no errors), and the goal at one client (server-stream)."""
    from fasttts_cli.build.tiny import FULL, write_tiny_checkpoint
    from fasttts_cli.tools.serve_bench import markdown, serve_table

    rows: list[Any] = []
    with table.timed("serve bench (full-size random, torch fp16)", mode) as d:
        ckpt = write_tiny_checkpoint(work / "ckpt", sizes=FULL, stop_bias=0.0)
        rows = serve_table(
            str(ckpt),
            _voice(work / "voice.wav"),
            label="torch-fp16",
            preset=str(_preset(work, 200)),
            clients=clients,
        )
        d.append(f"{len(rows)} rows")
    if rows:
        print(markdown(rows), flush=True)
    for r in rows:
        detail = f"first audio p50 {r.first_p50} s (max {r.first_max}), {r.lines_per_s} lines/s"
        detail += f", {r.audio_per_s} audio s/s"
        table.add(f"serve {r.mode} x{r.clients}", r.errors == 0, detail, r.wall, mode)
    one = [r for r in rows if r.mode == "server-stream" and r.clients == 1]
    if one:
        table.add(
            "target: first audio < 150 ms at one client (H200)",
            one[0].first_p50 < GOAL_FIRST_AUDIO_S,
            f"{one[0].first_p50 * 1000:.0f} ms",
        )
