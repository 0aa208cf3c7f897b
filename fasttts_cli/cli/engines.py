"""`fasttts presets`, `doctor`, `build`, `download` and `tiny-checkpoint`: the commands that find, fetch and
make engines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.progress import Reporter

# ---- presets -------------------------------------------------------------------------------------
from fasttts_cli.cli.shared import (
    Job,
    Output,
    build_extra,
    command,
)
from fasttts_cli.errors import ExitCode, FastTTSError, UsageError


@command("presets")
def presets() -> Job:
    """List the precision presets and what each needs."""

    def body(rep: Reporter) -> dict[str, Any]:
        return list_presets()

    def human(r: dict[str, Any]) -> None:
        from fasttts_cli.cli.tables import Column, print_table, print_wrapped

        rows = [
            (p["name"], p["needs"], _HERE[bool(p.get("can_build")), bool(p.get("can_run"))], p["description"])
            for p in r["presets"]
        ]
        cols = [Column("name"), Column("needs", wrap=True), Column("here"), Column("description", wrap=True)]
        print_table(cols, rows, title="presets (build with: fasttts build --preset NAME)")
        for p in r["presets"]:
            for m in p.get("missing", []):
                print_wrapped(f"{p['name']}: missing ", m)

    return body, human


# Building (torch + onnx) and running (the runtime, the GPU) need different things: say which holds.
_HERE = {
    (True, True): "build+run",
    (True, False): "build only",
    (False, True): "run only",
    (False, False): "no",
}


def list_presets() -> dict[str, Any]:
    from fasttts_cli.backends.gpu_stack import detect
    from fasttts_cli.spec.presets import available_presets, parse_preset

    stack = detect()
    out = []
    for name, path in sorted(available_presets().items()):
        try:
            p = parse_preset(path)
        except FastTTSError as e:
            out.append({"name": name, "file": str(path), "error": e.message, "needs": "?", "description": ""})
            continue
        backends = sorted({c.backend for c in p.components.values()})
        out.append(
            {
                "name": p.name,
                "file": str(path),
                "description": p.description,
                "backends": backends,
                "precisions": sorted({c.precision for c in p.components.values()}),
                "needs": _needs(backends),
                **_status(p, stack),
                "decode": p.run_keys()["decode"],
                "s2mel": p.run_keys()["s2mel"],
            }
        )
    return {"ok": True, "command": "presets", "presets": out}


def _status(preset: Any, stack: Any) -> dict[str, Any]:
    from fasttts_cli.backends.gpu_stack import preset_status

    try:
        st = preset_status(preset, stack)
    except FastTTSError as e:
        return {"can_build": False, "can_run": False, "missing": [e.message]}
    return {"can_build": st.can_build, "can_run": st.can_run, "missing": list(st.missing)}


def _needs(backends: list[str]) -> str:
    from fasttts_cli.spec import registry

    return "; ".join(registry.BACKENDS[b].needs if b in registry.BACKENDS else b for b in backends) or "-"


# ---- doctor --------------------------------------------------------------------------------------


@command("doctor")
def doctor() -> Job:
    """Check ffmpeg, engines, runtimes and the GPU stack; say what is missing and the licences in use."""
    from fasttts_cli.app.doctor import run_doctor

    def body(rep: Reporter) -> dict[str, Any]:
        r = run_doctor()
        r["_exit_code"] = 0 if r["ok"] else int(ExitCode.MISSING)
        return r

    def human(r: dict[str, Any]) -> None:
        import sys

        from fasttts_cli.cli.tables import status_lines, terminal_width

        width = terminal_width(sys.stdout)  # a terminal: long details wrap under their check
        mark = {"ok": "ok ", "missing": "MISSING", "warn": "warn", "info": "-- "}
        lines: list[str] = []
        for c in r["checks"]:
            lines += status_lines(
                f"[{mark.get(c['status'], c['status']):>7}] ", f"{c['name']}: {c['detail']}", width, 10
            )
            if c["fix"] and c["status"] != "ok":
                lines += status_lines("          fix: ", c["fix"], width, 15)
        lines.append("licences of the models in use:")
        for kind, rows in r["licences"].items():
            for row in rows:
                lines += status_lines(f"  [{kind}] ", f"{row['model']}: {row['licence']}", width, 4)
        lines += [f"problem: {p}" for p in r["problems"]]
        print("\n".join(lines))

    return body, human


# ---- engine building -----------------------------------------------------------------------------


@command("build", progress=True)
def build(
    checkpoint: Annotated[
        Path,
        typer.Option(
            "--checkpoint",
            metavar="DIR",
            help="IndexTTS-2 checkpoint: the official folder (as `fasttts download` writes it), the "
            "plain release folder, or the Hugging Face cache (a snapshot, models--IndexTeam--IndexTTS-2, "
            "or the hub folder). Auxiliary models are also looked for in $HF_HUB_CACHE / $HF_HOME/hub.",
        ),
    ],
    preset: Annotated[
        str, typer.Option("--preset", metavar="NAME|FILE", help="Preset to build.")
    ] = "cpu-fp32",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Engine folder (default engines/<checkpoint>-<preset>; from a HF cache: "
            "engines/IndexTTS-2-<preset>).",
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing engine folder.")
    ] = False,
    w2v_bert: Annotated[
        Path | None,
        typer.Option("--w2v-bert", metavar="DIR", help="w2v-BERT 2.0 folder (default hf_cache/)."),
    ] = None,
    codec: Annotated[
        Path | None, typer.Option("--codec", metavar="FILE", help="semantic_codec_model.safetensors.")
    ] = None,
    campplus: Annotated[
        Path | None, typer.Option("--campplus", metavar="FILE", help="campplus_cn_common.bin.")
    ] = None,
    bigvgan: Annotated[
        Path | None,
        typer.Option("--bigvgan", metavar="DIR", help="BigVGAN folder (config.json + generator)."),
    ] = None,
) -> Job:
    """Export an engine folder (ONNX per component, tokenizer, tables, manifest) from a checkpoint."""

    def body(rep: Reporter) -> dict[str, Any]:
        import time

        with build_extra():
            from fasttts_cli.build.export import build_engine
            from fasttts_cli.nets.checkpoint import CheckpointPaths
        if not checkpoint.is_dir():
            raise UsageError(
                f"--checkpoint {checkpoint}: not a directory",
                hint="fetch the release with `fasttts download DIR`, then build with --checkpoint DIR",
            )
        t0 = time.perf_counter()
        paths = CheckpointPaths(
            checkpoint, w2v_bert=w2v_bert, codec=codec, campplus=campplus, bigvgan=bigvgan
        )
        target = out if out is not None else _hub_default_out(checkpoint, preset)

        def say(msg: str) -> None:
            rep.info(msg)
            rep.event("stage", name=msg)

        def built(c: Any) -> None:  # build.export.ComponentBuilt
            rep.build_component(c.name, c.index, c.total, c.seconds)

        folder = build_engine(paths, preset, target, overwrite=overwrite, progress=say, on_component=built)
        return {
            "ok": True,
            "command": "build",
            "engine": str(folder),
            "preset": preset,
            "seconds": round(time.perf_counter() - t0, 2),
        }

    def human(r: dict[str, Any]) -> None:
        print(f"engine written to {r['engine']} ({r['seconds']} s); use it with --engine {r['engine']}")

    return body, human


def _hub_default_out(checkpoint: Path, preset: str) -> Path | None:
    """engines/IndexTTS-2-<preset> for a Hugging Face cache layout, whose folder names (a revision hash,
    `hub`) say nothing; None (the builder's own default) for the other layouts."""
    from fasttts_cli.nets.release_layout import HUB_KINDS, find_layout
    from fasttts_cli.synth.engine_select import engines_root

    if find_layout(checkpoint).kind not in HUB_KINDS:
        return None
    name = Path(preset).stem if preset.endswith(".toml") else preset
    return engines_root() / f"IndexTTS-2-{name}"


@command("download")
def download(
    out_dir: Annotated[
        Path | None,
        typer.Argument(
            metavar="DIR", help="Checkpoint folder to fill (new or partial); with --separation, optional."
        ),
    ] = None,
    model: Annotated[
        str, typer.Option("--model", metavar="[indextts2]", help="Model to fetch.")
    ] = "indextts2",
    with_qwen: Annotated[
        bool,
        typer.Option(
            "--with-qwen", help="Also fetch qwen0.6bemo4-merge/ (emotion from text; fasttts does not use it)."
        ),
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", metavar="DIR", help="Hugging Face cache (default: huggingface_hub's)."),
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision",
            metavar="REV",
            help="Revision of IndexTeam/IndexTTS-2: a branch, tag or commit (default main).",
        ),
    ] = None,
    separation: Annotated[
        bool,
        typer.Option(
            "--separation",
            help="Fetch the Demucs htdemucs separation model (for --separate) into DIR, default its cache.",
        ),
    ] = False,
    *,
    ui: Output,
) -> Job:
    """Fetch the public IndexTTS-2 release (5 Hugging Face repositories) into the layout `build` reads;
    with --separation, the Demucs htdemucs model that --separate runs."""
    from fasttts_cli.app.download import download_release

    if separation:
        return _download_separation(out_dir)

    def body(rep: Reporter) -> dict[str, Any]:
        if out_dir is None:
            raise UsageError(
                "download: missing DIR, the checkpoint folder to fill", hint="fasttts download DIR"
            )
        r = download_release(
            out_dir,
            model=model,
            with_qwen=with_qwen,
            cache_dir=cache_dir,
            revision=revision,
            progress=rep.info,
            progress_bars=not ui.quiet and not ui.json,
        )
        return r.to_json()

    def human(r: dict[str, Any]) -> None:
        print(
            f"checkpoint in {r['checkpoint']}: {r['fetched']} files fetched, {r['present']} already there "
            f"({r['bytes'] / 1e9:.2f} GB); next: fasttts build --checkpoint {r['checkpoint']}"
        )

    return body, human


def _download_separation(out_dir: Path | None) -> Job:
    def body(rep: Reporter) -> dict[str, Any]:
        from fasttts_cli.separation.fetch import fetch_separation
        from fasttts_cli.separation.model import default_dir

        return fetch_separation(out_dir or default_dir(), progress=rep.info).to_json()

    def human(r: dict[str, Any]) -> None:
        what = "already there" if r["present"] else "fetched"
        print(f"separation model in {r['separation']}: {what} ({r['bytes'] / 1e6:.1f} MB); use: --separate")

    return body, human


TINY_MODELS = ("indextts2", "indextts2.5")  # build.tiny.WRITERS' keys (named here: no torch import)


@command("tiny-checkpoint")
def tiny_checkpoint(
    out_dir: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to create (must be new or empty).")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights.")] = 0,
    full: Annotated[
        bool, typer.Option("--full", help="The release's full sizes instead of tiny ones (several GB).")
    ] = False,
    model: Annotated[
        str, typer.Option("--model", metavar="MODEL", help="The layout: indextts2 (default) or indextts2.5.")
    ] = "indextts2",
) -> Job:
    """Write a random-weight checkpoint in the official IndexTTS-2 (or 2.5) layout (tiny by default)."""

    def body(rep: Reporter) -> dict[str, Any]:
        if model not in TINY_MODELS:
            raise UsageError(f"--model {model!r} is not one of {', '.join(TINY_MODELS)}")
        with build_extra():
            from fasttts_cli.build.tiny import FULL_SIZES, WRITERS
        write = WRITERS[model]
        folder = write(out_dir, seed=seed, sizes=FULL_SIZES[model]) if full else write(out_dir, seed=seed)
        size = sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())
        return {
            "ok": True,
            "command": "tiny-checkpoint",
            "model": model,
            "checkpoint": str(folder),
            "bytes": size,
            "seed": seed,
        }

    def human(r: dict[str, Any]) -> None:
        print(f"checkpoint written to {r['checkpoint']} ({r['bytes'] / 1e6:.1f} MB)")

    return body, human
