"""`fasttts bench` and `fasttts calibrate`: measuring an engine and tuning its s2mel cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.progress import Reporter
from fasttts_cli.cli.shared import (
    Job,
    Output,
    build_extra,
    command,
)
from fasttts_cli.errors import UsageError

# bench and calibrate take the same --threads flag.
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="CPU threads (default: all).")]


@command("bench")
def bench(
    engine: Annotated[
        Path | None, typer.Option("--engine", metavar="DIR", help="Engine folder to time.")
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option("--checkpoint", metavar="DIR", help="The engine's checkpoint, for the eager side."),
    ] = None,
    random_weights: Annotated[
        bool, typer.Option("--random-weights", help="Full-size random checkpoint + engine in a temp folder.")
    ] = False,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset", metavar="NAME|FILE", help="Default: the engine's own (cpu-fp32 when random)."
        ),
    ] = None,
    tokens: Annotated[int, typer.Option("--tokens", help="Generated tokens per line (forced).")] = 100,
    batch: Annotated[str, typer.Option("--batch", metavar="1,4,8", help="Batch sizes.")] = "1,4,8",
    beams: Annotated[str, typer.Option("--beams", metavar="1,3", help="Beam counts.")] = "1,3",
    steps_timed: Annotated[
        int, typer.Option("--steps-timed", help="CFM steps run per measurement (scaled to the preset's).")
    ] = 2,
    threads: ThreadsOpt = None,
    no_eager: Annotated[bool, typer.Option("--no-eager", help="Skip the PyTorch eager side.")] = False,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Time ours then eager this many times; report medians.")
    ] = 1,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="MODEL",
            help="--random-weights: indextts2 (default) or indextts2.5; with --engine it must match.",
        ),
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option("--work-dir", metavar="DIR", help="Keep the random checkpoint/engine here.")
    ] = None,
    *,
    ui: Output,
) -> Job:
    """Per-stage times, RTF and lines/s: our runtime vs the PyTorch eager modules, same weights, one run."""

    def ints(flag: str, value: str) -> tuple[int, ...]:
        try:
            out = tuple(int(v) for v in value.split(",") if v.strip())
        except ValueError:
            out = ()
        if not out or min(out) < 1:
            raise UsageError(f"{flag} {value!r}: expected positive integers such as 1,4,8")
        return out

    def body(rep: Reporter) -> dict[str, Any]:
        with build_extra():
            from fasttts_cli.tools.bench import BenchOptions, format_table, run_bench, to_json
        if not random_weights and engine is None:
            raise UsageError("bench: give --engine DIR or --random-weights")
        opts = BenchOptions(
            engine=engine,
            checkpoint=checkpoint,
            random_weights=random_weights,
            preset=preset,
            tokens=tokens,
            batches=ints("--batch", batch),
            beams=ints("--beams", beams),
            s2mel_steps_timed=steps_timed,
            eager=not no_eager,
            threads=threads,
            work_dir=work_dir,
            rounds=rounds,
            model=model,
        )
        result = run_bench(opts, progress=rep.info)
        table = format_table(result)
        # numpy scalars and int keys: bench's own encoder makes the result plain JSON
        return {"ok": True, "command": "bench", **json.loads(to_json(result)), "_table": table}

    def human(r: dict[str, Any]) -> None:
        print(r["_table"])

    def body_json(rep: Reporter) -> dict[str, Any]:
        r = body(rep)
        if ui.json:
            r.pop("_table", None)
        return r

    return body_json, human


@command("calibrate", progress=True)
def calibrate(
    engine: Annotated[Path, typer.Option("--engine", metavar="DIR", help="Engine folder to calibrate.")],
    voice: Annotated[
        list[Path], typer.Option("--voice", metavar="REF", help="A reference voice (repeat: a few of yours).")
    ],
    text: Annotated[
        list[str], typer.Option("--text", metavar="TEXT", help="A calibration line (repeat: a few of yours).")
    ],
    level: Annotated[
        list[str] | None, typer.Option("--level", metavar="T1..T6", help="Levels to calibrate (default all).")
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            metavar="DIR",
            help="The engine's checkpoint (needed once, to export the DiT pieces).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the calibration noise and codes.")] = 0,
    max_codes: Annotated[
        int | None, typer.Option("--max-codes", help="Cap each line's codes (faster calibration).")
    ] = None,
    max_trials: Annotated[
        int | None,
        typer.Option("--max-trials", help="Cap the trials per pass (untried modules stay computed)."),
    ] = None,
    threads: ThreadsOpt = None,
) -> Job:
    """Calibrate the s2mel cache (DiTReducio-style step and CFG-branch skipping) into an engine folder."""

    def body(rep: Reporter) -> dict[str, Any]:
        from fasttts_cli.errors import EngineMismatchError, MissingDependencyError
        from fasttts_cli.indextts2.calibrate_engine import calibrate as run_calibration
        from fasttts_cli.indextts2.s2mel_cache.piecewise_ort import PIECES_DIR
        from fasttts_cli.indextts2.s2mel_cache.policy import LEVELS
        from fasttts_cli.spec.engine_folder import read_manifest

        levels = list(level or [k for k in LEVELS if k != "T0"])
        for lv in levels:
            if lv not in LEVELS or lv == "T0":
                raise UsageError(
                    f"--level {lv}: unknown", hint=f"choose from {', '.join(k for k in LEVELS if k != 'T0')}"
                )
        for v in voice:
            if not v.is_file():
                raise UsageError(f"--voice {v}: file not found")
        manifest = read_manifest(engine, expect_model="indextts2")
        if not (engine / PIECES_DIR).is_dir():
            if checkpoint is None:
                raise MissingDependencyError(
                    f"{engine}: has no {PIECES_DIR}/ (the DiT exported in pieces)",
                    hint="pass --checkpoint DIR (the engine's own checkpoint) once to export them",
                )
            with build_extra():
                from fasttts_cli.build.s2mel_pieces import export_pieces_into_engine
                from fasttts_cli.nets.checkpoint import CheckpointPaths, load_checkpoint
            rep.info(f"loading {checkpoint}")
            m = load_checkpoint(CheckpointPaths(checkpoint))
            if m.digest() != manifest.checkpoint_digest:
                raise EngineMismatchError(
                    f"--checkpoint {checkpoint}: not the checkpoint {engine} was built from (digest differs)"
                )
            rep.info(f"exporting the DiT pieces into {engine / PIECES_DIR}")
            export_pieces_into_engine(engine, m.s2mel.cfm.estimator)
        extra = {} if max_trials is None else {"max_trials": max_trials}
        ps = run_calibration(
            engine,
            voice,
            text,
            levels,
            seed=seed,
            threads=threads,
            max_codes=max_codes,
            progress=rep.info,
            **extra,
        )
        rows = {
            k: {"threshold": p.threshold, "kept": round(p.kept_fraction(), 4), "error": p.error}
            for k, p in sorted(ps.levels.items())
        }
        return {"ok": True, "command": "calibrate", "engine": str(engine), "levels": rows}

    def human(r: dict[str, Any]) -> None:
        print(
            f"s2mel cache policy written into {r['engine']}; pick a level with s2mel.cache_level in a preset"
        )
        for k, row in r["levels"].items():
            err = "-" if row["error"] is None else f"{row['error']:.4f}"
            print(f"  {k}: threshold {row['threshold']:.4f}, modules kept {row['kept']:.3f}, error {err}")

    return body, human
