"""`--fit model` against `--fit stretch` on one script, side by side in one run, alternating.

    python -m fasttts_cli.tools.fit_bench samples/dense.tsv --voice ALICE=samples/voices/alice.wav \\
        --voice BOB=samples/voices/bob.wav --rounds 2 --out /tmp/fitbench [--engine DIR] [--json]

Each round dubs the script once per mode, in alternating order, each into a fresh work folder (nothing
cached: wall time includes synthesis). Per mode it reports the share of lines that needed any DSP tempo
change, the largest DSP factor and the largest total factor, the median wall time, and an artifact proxy
that needs no listener.

The artifact proxy (method): every line that either mode changed (rendered to a length or stretched) is
cut from that mode's final mix (`dub.wav`, at its placed start and end) and compared with the same line at
its natural length (the stretch run's natural render, the same reference for both modes). WORLD (pyworld)
analyses each at 5 ms frames: Harvest for f0, D4C for band aperiodicity. Two figures, as the change from the
natural audio, averaged over those lines: `aperiodicity` (mean D4C aperiodicity of voiced frames below
4 kHz; a phase-vocoder stretch smears harmonics into noise, which raises it) and `f0_jump` (mean absolute
f0 change between consecutive voiced frames, in semitones; a stretch's frame-splicing shows as pitch
jitter). Lower is closer to natural speech. `floor` is the same comparison between two natural readings of
each line (the model run's own plan audio against the reference), where the engine's plan is audio (the
draft voice samples fresh noise on every run): a mode's figure within the floor is indistinguishable from
reading the line again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MODES = ("model", "stretch")
FRAME_MS = 5.0
AP_MAX_HZ = 4000.0


@dataclass
class ModeResult:
    mode: str
    walls: list[float] = field(default_factory=list)
    report: dict[str, Any] | None = None
    work_dir: Path | None = None

    def summary(self) -> dict[str, Any]:
        assert self.report is not None
        lines = [ln for ln in self.report["lines"] if ln.get("stretch_factor") is not None]
        stretched = [ln for ln in lines if abs(ln["stretch_factor"] - 1.0) > 1e-6]
        return {
            "lines": len(lines),
            "stretched": len(stretched),
            "share_stretched": round(len(stretched) / max(1, len(lines)), 4),
            "rendered_to_fit": sum(1 for ln in lines if abs(ln["render_factor"] - 1.0) > 1e-6),
            "max_stretch": round(max((ln["stretch_factor"] for ln in lines), default=1.0), 4),
            "max_total_factor": round(max((ln["factor"] for ln in lines), default=1.0), 4),
            "wall_s": round(statistics.median(self.walls), 2),
            "wall_s_rounds": [round(w, 2) for w in self.walls],
        }


def voice_measures(x: np.ndarray, sr: int) -> tuple[float, float] | None:
    """(mean voiced aperiodicity below 4 kHz, mean |f0 step| in semitones) of mono audio; None when
    WORLD finds fewer than two voiced frames."""
    import pyworld as pw

    a = np.ascontiguousarray(x, dtype=np.float64)
    f0, t = pw.harvest(a, sr, frame_period=FRAME_MS)
    voiced = f0 > 0
    if voiced.sum() < 2:
        return None
    ap = pw.d4c(a, f0, t, sr)
    bins = ap.shape[1]
    top = max(1, round(AP_MAX_HZ / (sr / 2) * (bins - 1)) + 1)
    aper = float(ap[voiced, :top].mean())
    both = voiced[1:] & voiced[:-1]
    steps = np.abs(12.0 * np.log2(f0[1:][both] / f0[:-1][both])) if both.any() else np.zeros(1)
    return aper, float(steps.mean())


def _dub(script: Path, voices: list[str], engine: str | None, folder: Path, mode: str) -> tuple[float, Any]:
    from fasttts_cli.app.pipeline import DubOptions, run_dub

    if folder.exists():
        shutil.rmtree(folder)
    o = DubOptions(script=script, voices=voices, lang="eng", output_dir=folder, engine=engine, fit=mode)
    t0 = time.perf_counter()
    res = run_dub(o)
    return time.perf_counter() - t0, res


def _segment(dub: np.ndarray, sr: int, line: dict[str, Any]) -> np.ndarray:
    return dub[round(line["start"] * sr) : round(line["end"] * sr)]


def artifact_proxy(model: ModeResult, stretch: ModeResult) -> dict[str, Any]:
    """The proxy of the module docstring for both modes, over the lines either mode changed."""
    import soundfile as sf

    from fasttts_cli.dubbing.cache import LineCache, render_key

    assert model.report is not None and stretch.report is not None
    assert model.work_dir is not None and stretch.work_dir is not None
    by_mode = {m.mode: {ln["index"]: ln for ln in m.report["lines"]} for m in (model, stretch)}  # type: ignore[union-attr]

    def changed(ln: dict[str, Any]) -> bool:
        return ln.get("stretch_factor") not in (None, 1.0) or ln.get("render_factor") not in (None, 1.0)

    ids = sorted(
        i
        for i in by_mode["stretch"]
        if changed(by_mode["stretch"][i]) or changed(by_mode["model"].get(i, {}))
    )
    natural_cache = LineCache(stretch.work_dir / "lines")
    dubs = {
        m.mode: sf.read(str(m.work_dir / "dub.wav"), dtype="float32", always_2d=True)
        for m in (model, stretch)
    }  # type: ignore[operator]
    deltas: dict[str, list[tuple[float, float]]] = {"model": [], "stretch": [], "floor": []}
    model_plans = LineCache(model.work_dir / "plans")
    for i in ids:
        ref_line = by_mode["stretch"][i]
        hit = natural_cache.get(render_key(ref_line["key"], None))
        if hit is None:
            continue
        ref = voice_measures(hit.audio, hit.sample_rate)
        if ref is None:
            continue
        got = {}
        for mode in MODES:
            audio, sr = dubs[mode]
            got[mode] = voice_measures(_segment(audio[:, 0], sr, by_mode[mode][i]), sr)
        if any(v is None for v in got.values()):
            continue
        for mode in MODES:
            g = got[mode]
            assert g is not None
            deltas[mode].append((g[0] - ref[0], g[1] - ref[1]))
        again = model_plans.get(by_mode["model"][i]["key"])
        if again is not None and again.audio.dtype == np.float32:
            f = voice_measures(again.audio, again.sample_rate)
            if f is not None:
                deltas["floor"].append((f[0] - ref[0], f[1] - ref[1]))
    out: dict[str, Any] = {"lines_compared": len(deltas["model"]), "method": "WORLD Harvest f0 + D4C, 5 ms"}
    if not deltas["floor"]:
        del deltas["floor"]
    for mode in deltas:
        d = np.array(deltas[mode]) if deltas[mode] else np.zeros((1, 2))
        out[mode] = {
            "aperiodicity_delta": round(float(d[:, 0].mean()), 4),
            "f0_jump_delta_st": round(float(d[:, 1].mean()), 4),
        }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    results = {m: ModeResult(m) for m in MODES}
    for r in range(args.rounds):
        order = MODES if r % 2 == 0 else MODES[::-1]
        for mode in order:
            folder = args.out / f"{mode}-{r}"
            wall, res = _dub(args.script, args.voice, args.engine, folder, mode)
            m = results[mode]
            m.walls.append(wall)
            m.report = json.loads(Path(res.report_path).read_text())
            m.work_dir = res.work_dir
    return {
        "script": str(args.script),
        "engine": results["model"].report["engine"] if results["model"].report else None,  # type: ignore[index]
        "rounds": args.rounds,
        "modes": {m: results[m].summary() for m in MODES},
        "artifact_proxy": artifact_proxy(results["model"], results["stretch"]),
    }


def table(r: dict[str, Any]) -> str:
    rows = [
        "| mode | lines | stretched (share) | largest DSP factor | largest total | aperiodicity Δ "
        "| f0 jump Δ (st) | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        s, a = r["modes"][mode], r["artifact_proxy"][mode]
        rows.append(
            f"| {mode} | {s['lines']} | {s['stretched']} ({s['share_stretched']:.0%}) | {s['max_stretch']} | "
            f"{s['max_total_factor']} | {a['aperiodicity_delta']:+.4f} | {a['f0_jump_delta_st']:+.4f} | "
            f"{s['wall_s']} |"
        )
    floor = r["artifact_proxy"].get("floor")
    if floor is not None:
        rows.append(
            f"| (floor: natural vs natural) | | | | | {floor['aperiodicity_delta']:+.4f} | "
            f"{floor['f0_jump_delta_st']:+.4f} | |"
        )
    rows.append(
        f"\nartifact proxy over {r['artifact_proxy']['lines_compared']} changed lines "
        f"({r['artifact_proxy']['method']})"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fasttts_cli.tools.fit_bench", description=__doc__.split("\n")[0]
    )
    ap.add_argument("script", type=Path)
    ap.add_argument("--voice", action="append", default=[], help="as for `fasttts dub`")
    ap.add_argument("--engine", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True, help="folder for the runs (replaced)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    r = run(args)
    print(json.dumps(r, indent=2) if args.json else table(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
