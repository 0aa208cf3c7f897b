"""The review page's data from a work folder's report.json: each line's status, its files, the retake
command. Pure functions over the report (and the line cache for the per-line audio), so the page of an
old work folder and the page `fasttts dub` writes come from the same code."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

EPS = 1e-3  # factors and seconds in report.json are rounded to 4 decimals

# What timing did to a line, strongest first: the first that applies colours the line's block. The keys
# are the page's CSS classes (`st-<key>`); README's review section lists the same table.
STATUSES: tuple[tuple[str, str, str], ...] = (
    ("failed", "failed", "synthesis failed; the line was dropped (--on-line-failure skip)"),
    ("silence", "silence", "synthesis failed; its slot was left silent (--on-line-failure silence)"),
    ("truncated", "truncated", "cut at its slot's end with a fade (--overflow truncate)"),
    ("overflowing", "overflowing", "still longer than its slot at the caps: plays over what follows"),
    ("shifted", "shifted", "starts later than its cue: an earlier line overran (--overflow shift)"),
    ("sped-up", "sped up", "DSP tempo > 1: played faster after rendering"),
    ("slowed", "slowed", "DSP tempo < 1: played slower after rendering"),
    ("rendered", "rendered to fit", "the model spoke it faster or slower to its target; no DSP"),
    ("fit", "fits", "spoken at its natural pace inside its slot"),
)


def line_status(ln: Mapping[str, Any]) -> str:
    """The one status a line is coloured by (STATUSES, strongest first)."""
    if ln.get("error") is not None or ln.get("start") is None:
        return "silence" if ln.get("action") == "silence" else "failed"
    if ln.get("truncated"):
        return "truncated"
    if (ln.get("overflow") or 0.0) > EPS:
        return "overflowing"
    if (ln.get("shift") or 0.0) > EPS:
        return "shifted"
    stretch = ln.get("stretch_factor") or 1.0
    if stretch > 1.0 + EPS:
        return "sped-up"
    if stretch < 1.0 - EPS:
        return "slowed"
    if abs((ln.get("render_factor") or 1.0) - 1.0) > EPS:
        return "rendered"
    return "fit"


# ---- the retake command --------------------------------------------------------------------------

# Flags the page replaces with its own selection: a recorded `--retake`/`--take` was that run's choice,
# and the work folder keeps the chosen takes, so the new command carries only the new --retake.
_REPLACED = ("--retake", "--take")


def base_command(argv: Sequence[str], cwd: str | None) -> str:
    """The dub's own command line, shell-quoted, without its --retake/--take flags, run from the folder it
    was run in (its relative paths are relative to that folder). The page appends `--retake N,M-K`."""
    kept: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--":
            kept += argv[i:]
            break
        if a in _REPLACED:
            skip = True
            continue
        if a.startswith(tuple(f + "=" for f in _REPLACED)):
            continue
        kept.append(a)
    cmd = shlex.join(kept)
    return f"cd {shlex.quote(cwd)} && {cmd}" if cwd else cmd


def retake_command(prefix: str, indices: Sequence[int]) -> str:
    """What the page composes for a selection (the test compares the page's text against this)."""
    from fasttts_cli.app.job import format_ranges

    return f"{prefix} --retake {format_ranges(indices).replace(' ', '')}"


# ---- paths ---------------------------------------------------------------------------------------


def href(target: Path, page_dir: Path) -> str:
    """`target` as the page links it: a relative URL when it is on the page's drive, else a file:// URI."""
    try:
        rel = os.path.relpath(target.resolve(), page_dir.resolve())
    except ValueError:  # another drive (Windows): no relative path exists
        return target.resolve().as_uri()
    return "/".join(quote(p) for p in Path(rel).parts)


def resolve_recorded(path: str | None, cwd: str | None) -> Path | None:
    """A path from report.json, as the dub saw it: relative to the folder the dub ran in."""
    if not path or path == "-":
        return None
    p = Path(path)
    if not p.is_absolute() and cwd:
        p = Path(cwd) / p
    return p if p.exists() else None


# ---- per line ------------------------------------------------------------------------------------

# The report's per-line keys the page shows, as they are (numbers stay the report's rounded values).
_COPIED = (
    "index",
    "speaker",
    "text",
    "source",
    "slot",
    "start",
    "end",
    "natural",
    "target",
    "duration",
    "render_factor",
    "stretch_factor",
    "factor",
    "shift",
    "overflow",
    "truncated",
    "action",
    "note",
    "retries",
    "seed",
    "cached",
    "error",
    "reference",
    "emotion_reference",
    "emotion_fallback",
)


def line_warnings(index: int, warnings: Sequence[str]) -> list[str]:
    """The run's warnings that name this line: "line 7: ..." or "lines 3-5, 9 ..." (format_ranges)."""
    out = []
    for w in warnings:
        for m in re.finditer(r"\blines?\s+(\d+(?:\s*-\s*\d+)?(?:,\s*\d+(?:\s*-\s*\d+)?)*)", w):
            spans = re.findall(r"(\d+)(?:\s*-\s*(\d+))?", m.group(1))
            if any(int(a) <= index <= int(b or a) for a, b in spans):
                out.append(w)
                break
    return out


def page_line(
    ln: Mapping[str, Any],
    warnings: Sequence[str],
    clip: str | None,
    lufs: float | None,
) -> dict[str, Any]:
    """One line as the page's script reads it: the report's values, its status, take, and `clip`: the name
    of its WAV in the page's clips folder (the render key; None: no audio)."""
    out = {k: ln.get(k) for k in _COPIED if ln.get(k) is not None}
    out["status"] = line_status(ln)
    out["take"] = int(ln.get("take") or 1)
    out["takes"] = [int(t) for t in (ln.get("takes") or [out["take"]])]
    # No `emotion`: the page shows the run's default (emotion_default), kept once, not per line.
    if ln.get("emotion_reference"):
        out["emotion"] = f"its own cue: {ln['emotion_reference']}"
    elif ln.get("emotion_fallback"):
        out["emotion"] = "the reference (the cue had too little speech)"
    if clip is not None:
        out["clip"] = clip
    if lufs is not None:
        out["lufs"] = round(lufs, 1)
    own = line_warnings(int(ln["index"]), warnings)
    if own:
        out["warnings"] = own
    return out


def emotion_default(options: Mapping[str, Any]) -> str:
    """Where a line's emotion comes from when it has no clip of its own (report.json's `options`)."""
    emo = options.get("emotion") or {}
    if isinstance(emo, Mapping):
        alpha = emo.get("alpha", 1.0)
        if emo.get("audio"):
            return f"--emotion-audio {emo['audio']} (alpha {alpha})"
        if emo.get("vector"):
            vec = ",".join(f"{v:g}" for v in emo["vector"])
            return f"--emotion-vector {vec} (alpha {alpha})"
    return "the reference"


def pack(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows of dicts as one key list and value lists (null where a row lacks the key): a film's 1,500
    lines repeat two dozen key names each, a third of the page's size. The page's script unpacks it."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {"keys": keys, "rows": [[r.get(k) for k in keys] for r in rows]}
