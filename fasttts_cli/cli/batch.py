"""`fasttts batch JOBS [dub flags]`: a manifest of dub jobs on one warm engine (the work: app/batch.py).

A row is parsed by dub's own click command (`DubArgv`), so every flag, default and check is dub's; the dub
flags after JOBS are the defaults every row may override."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.manifest import Flag
from fasttts_cli.app.progress import Reporter
from fasttts_cli.cli.shared import Job, Output, app, command, dub_options, fail

# Flags every command has: they are `batch`'s own, not a job's.
_OUTPUT_PARAMS = frozenset({"json_out", "progress_jsonl", "quiet", "verbose"})


class DubArgv:
    """dub's click command as the manifest's parser: its parameters are the manifest's keys."""

    def __init__(self) -> None:
        cmd = typer.main.get_command(app)
        self.cmd = cmd.commands["dub"]  # type: ignore[attr-defined]
        self.flags: Mapping[str, Flag] = {}
        flags: dict[str, Flag] = {}
        for p in self.cmd.params:
            if p.name is None or p.name in _OUTPUT_PARAMS:
                continue
            longs = [o for o in p.opts if o.startswith("--")]
            opt = max(longs, key=len) if longs else (p.opts[0] if p.param_type_name == "option" else "")
            off = next((o for o in getattr(p, "secondary_opts", []) if o.startswith("--")), None)
            switch = bool(getattr(p, "is_flag", False))
            flags[p.name] = Flag(p.name, opt, bool(getattr(p, "multiple", False)), switch, off)
        self.flags = flags

    def parse(self, argv: list[str]) -> dict[str, Any]:
        from fasttts_cli.app.manifest import FieldProblem
        from fasttts_cli.cli.commands import _CLICK_ERRORS

        try:
            ctx = self.cmd.make_context("dub", list(argv))
        except _CLICK_ERRORS as e:
            param = getattr(e, "param", None)
            key = getattr(param, "name", None)
            raise FieldProblem(key, e.format_message()) from None  # type: ignore[attr-defined]
        return dict(ctx.params)

    def options(self, params: Mapping[str, Any]) -> Any:
        return dub_options(params, check_files=False)


# How the lines are planned: here (default), on worker processes, one engine per device, or on Ray actors.
FailFastOpt = Annotated[
    bool, typer.Option("--fail-fast/--keep-going", help="Stop at the first failed job (default: go on).")
]
WorkersOpt = Annotated[int | None, typer.Option("--workers", help="Plan on N worker processes (CPU).")]
DevicesOpt = Annotated[
    str | None,
    typer.Option(
        "--devices", metavar="cuda:0,cuda:1", help="One engine per device; batches spread over them."
    ),
]
RayOpt = Annotated[
    str | None, typer.Option("--ray", metavar="auto|ADDRESS", help="Plan on Ray actors (the `ray` extra).")
]


@command(
    "batch",
    progress=True,
    epilog="Exit codes: 0 every job ok; 1 some job failed (or did not run); 2 the manifest or a flag is "
    "invalid (nothing ran); 3 missing dependency (an engine that cannot be loaded); 130 interrupted "
    "(every finished line stays cached).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def batch(
    ctx: typer.Context,
    jobs: Annotated[
        Path,
        typer.Argument(
            help="Manifest: .jsonl (one JSON object a line) or .csv (a header of keys); one dub job a row. "
            "Keys: dub's flags with underscores (script, voice, video, lang, output, output_dir, engine, "
            "...) and an optional id. Dub flags after JOBS are every row's defaults."
        ),
    ],
    fail_fast: FailFastOpt = False,
    workers: WorkersOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
    ui: Output | None = None,
) -> Job:
    """Dub every job of a manifest in one process: one warm engine, lines batched across jobs."""
    defaults = list(ctx.args)

    def body(rep: Reporter) -> dict[str, Any]:
        from fasttts_cli.app.batch import BatchOptions, run_batch
        from fasttts_cli.app.batch_progress import tally
        from fasttts_cli.app.manifest import ManifestError, load_jobs
        from fasttts_cli.errors import FastTTSError, UsageError

        assert ui is not None
        try:
            if workers is not None and workers < 1:
                raise UsageError(f"--workers must be >= 1 (got {workers})")
            manifest = load_jobs(jobs, DubArgv(), defaults)
        except FastTTSError as e:
            problems = e.problems if isinstance(e, ManifestError) else []
            fail(False, rep, "batch", e.message, e.hint, int(e.exit_code), type(e).__name__, ui.verbosity)
            for p in problems[1:]:
                print(f"  {p.text(jobs)}", file=sys.stderr)
            return {
                "ok": False,
                "command": "batch",
                "jobs": [],
                "error": e.message,
                "hint": e.hint,
                "kind": type(e).__name__,
                "exit_code": int(e.exit_code),
                "problems": [p.to_json() for p in problems],
                "warnings": rep.warnings,
                "_exit_code": int(e.exit_code),
            }
        how: dict[str, Any] = {}
        if workers is not None:
            how["workers"] = workers
        if devices:
            how["devices"] = [d.strip() for d in devices.split(",") if d.strip()]
        if ray:
            how["ray"] = ray
        res = run_batch(manifest, rep, BatchOptions(fail_fast=fail_fast, pool=how))
        out = res.to_json()
        out["counts"] = tally(j["status"] for j in out["jobs"])  # the closing line's numbers
        if "error" in out:
            fail(False, rep, "batch", out["error"], out["hint"], out["exit_code"], out["kind"], ui.verbosity)
        out["warnings"] = rep.warnings
        out["_exit_code"] = res.exit_code
        return out

    return body, _human


def _human(r: dict[str, Any]) -> None:
    for j in r.get("jobs", []):
        if j["ok"]:
            o = j["outputs"]
            main = o.get("video") or o.get("audio") or o.get("would_write") or o.get("plan")
            ln = j["lines"]
            said = (
                f"{ln.get('synthesized', 0)} synthesized, {ln.get('cached', 0)} cached"
                if "cached" in ln
                else ""
            )
            print(f"{j['id']}: ok: {main}" + (f" ({said})" if said else ""))
        else:
            code = "" if j["exit_code"] is None else f" (exit {j['exit_code']})"
            print(f"{j['id']}: {j['status'].replace('_', ' ')}{code}: {j['error']}")
            if j.get("hint"):  # what to do: for a job's own bad input, which manifest row and key
                print(f"  hint: {j['hint']}")
    if r.get("jobs"):
        from fasttts_cli.app.batch_progress import summary_line

        print(summary_line(r["counts"]))
