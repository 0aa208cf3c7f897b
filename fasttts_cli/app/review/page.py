"""Write the review page: `<output stem>.review.html` beside the dub's outputs.

One HTML file with its script, style and data inline (so it opens from `file://` with no server and no
network) and every sound and picture referenced by a path relative to the page: the line WAVs in
`<work>/review/lines/`, the mix `<work>/dub.wav`, the source video or dialogue stem. Written atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fasttts_cli import __version__
from fasttts_cli.app.job import VIDEO_EXTS
from fasttts_cli.app.review.clips import CLIPS, line_clips
from fasttts_cli.app.review.data import (
    STATUSES,
    base_command,
    emotion_default,
    href,
    pack,
    page_line,
    resolve_recorded,
)
from fasttts_cli.dubbing.cache import atomic_write_text
from fasttts_cli.errors import UsageError

SUFFIX = ".review.html"


@dataclass(frozen=True)
class ReviewPage:
    path: Path
    size: int  # bytes of the HTML file
    lines: int
    placed: int  # lines with a block on the timeline's dub row
    envelope: bool  # the original audio's envelope is drawn

    def to_json(self) -> dict[str, Any]:
        return {
            "page": str(self.path),
            "bytes": self.size,
            "lines": self.lines,
            "placed": self.placed,
            "envelope": self.envelope,
        }


def page_for(media: Path) -> Path:
    """`out/demo.eng.mp4` -> `out/demo.eng.review.html`."""
    return media.with_name(media.stem + SUFFIX)


def run_record(argv: list[str] | None, media: Path, subtitles: Path) -> dict[str, Any]:
    """report.json's `command` (the dub's argv and the folder it ran in: the page's retake command starts
    from it) and `outputs` (absolute paths: `fasttts review` finds the page's place and the dubbed file)."""
    return {
        "command": {"argv": ["fasttts", *argv], "cwd": os.getcwd()} if argv is not None else None,
        "outputs": {
            "media": str(media.resolve()),
            "subtitles": str(subtitles.resolve()),
            "review": str(page_for(media).resolve()),
        },
    }


def write_review(
    work_dir: Path, report: Mapping[str, Any], page: Path, warn: Callable[[str], None]
) -> ReviewPage:
    """Write the page of `report` (the work folder's report.json, as a dict) to `page`. The caller holds
    the work folder's lock (line WAVs and the envelope are written into it)."""
    from fasttts_cli.app.review.envelope import source_envelope

    page_dir = page.parent
    page_dir.mkdir(parents=True, exist_ok=True)
    command = report.get("command") or {}
    cwd = command.get("cwd")
    options = report.get("options") or {}
    video = resolve_recorded(report.get("video"), cwd)
    source = resolve_recorded(options.get("dialogue_stem"), cwd) or video
    if report.get("video") and video is None:
        warn(f"review page: the source video {report['video']} is not there; no picture or original audio")
    envelope = source_envelope(source, work_dir) if source is not None else None

    report_lines = report.get("lines") or []
    loudness = line_clips(work_dir, report_lines, warn)
    warnings = report.get("warnings") or []
    lines = []
    for ln in report_lines:
        key = ln.get("render_key")
        has_clip = key in loudness
        lines.append(
            page_line(ln, warnings, key if has_clip else None, loudness.get(key) if has_clip else None)
        )

    ends = [ln["end"] for ln in lines if ln.get("end") is not None]
    ends += [ln["slot"][1] for ln in lines if ln.get("slot")]
    if envelope is not None:
        ends.append(len(envelope.peaks) * envelope.hop)
    dubbed = (report.get("outputs") or {}).get("media")
    # The dubbed video (not an audio-only output): its picture stands in for a source that moved.
    dubbed_path = Path(dubbed) if dubbed and Path(dubbed).suffix.lower() in VIDEO_EXTS else None
    dubbed_path = dubbed_path if dubbed_path is not None and dubbed_path.exists() else None
    data = {
        "title": page.name[: -len(SUFFIX)] if page.name.endswith(SUFFIX) else page.stem,
        "fasttts": __version__,
        "script": report.get("script"),
        "engine": (report.get("engine") or {}).get("kind"),
        "duration": round(max(ends, default=1.0), 3),
        "media": {
            "video": href(video, page_dir) if video is not None else None,
            "source": href(source, page_dir) if source is not None else None,
            "mix": href(work_dir / "dub.wav", page_dir) if (work_dir / "dub.wav").exists() else None,
            "dubbed": href(dubbed_path, page_dir) if dubbed_path is not None else None,
            "clips": href(work_dir / CLIPS, page_dir) + "/",  # + a line's `clip` + ".wav"
        },
        "emotion_default": emotion_default(options),
        "envelope": envelope.to_json() if envelope is not None else None,
        "command": base_command(command["argv"], cwd) if command.get("argv") else None,
        "statuses": [list(s) for s in STATUSES],
        "summary": report.get("summary") or {},
        "loudness_target": options.get("loudness"),
        "lines": pack(lines),
    }
    html = render_html(data)
    atomic_write_text(page, html)
    placed = sum(1 for ln in lines if ln.get("start") is not None)
    return ReviewPage(page, len(html.encode("utf-8")), len(lines), placed, envelope is not None)


def _asset(name: str) -> str:
    return resources.files("fasttts_cli.app.review").joinpath("assets", name).read_text(encoding="utf-8")


def render_html(data: Mapping[str, Any]) -> str:
    """The page: the template with the style, the script and the data inlined. The data is JSON in a
    `<script type="application/json">`; `<` is escaped so no text (a line saying `</script>`) can end it."""
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    template = _asset("review.html")
    parts = {"/*STYLE*/": _asset("review.css"), "/*SCRIPT*/": _asset("review.js"), "/*DATA*/": blob}
    for mark, text in parts.items():
        # Inline text must not close its own element early (the assets are ours: this guards edits).
        assert "</script" not in text.lower() and "</style" not in text.lower(), mark
        template = template.replace(mark, text)
    return template.replace("<!--TITLE-->", _escape(str(data["title"])))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def review_work_dir(work_dir: Path, output: Path | None, rep: Any) -> ReviewPage:
    """`fasttts review WORK_DIR [-o FILE]`: the page again from the folder's report.json, under the
    folder's lock; nothing is synthesized. Exit 2 naming the folder if it is not a fasttts work folder."""
    from fasttts_cli.dubbing.worklock import hold_work_dir

    report_file = work_dir / "report.json"
    why = None
    if not work_dir.is_dir():
        why = "no such folder" if not work_dir.exists() else "not a folder"
    elif not report_file.is_file():
        why = "no report.json in it"
    if why is None:
        try:
            report = json.loads(report_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            report, why = None, f"its report.json cannot be read: {e}"
        if why is None and not (isinstance(report, dict) and isinstance(report.get("lines"), list)):
            why = "its report.json is not a fasttts dub report"
    if why is not None:
        raise UsageError(
            f"{work_dir}: not a fasttts work folder ({why})",
            hint="give the <stem>.fasttts/ folder a finished `fasttts dub` wrote (its --work-dir)",
        )
    recorded = (report.get("outputs") or {}).get("review")
    name = work_dir.name[: -len(".fasttts")] if work_dir.name.endswith(".fasttts") else work_dir.name
    beside = work_dir.parent / (Path(recorded).name if recorded else name + SUFFIX)
    # Where the dub wrote it; beside the work folder when that folder is gone (a work folder moved or
    # copied from another machine) or the report predates the record.
    page = output or (Path(recorded) if recorded and Path(recorded).parent.is_dir() else beside)
    if page.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"-o/--output {page}: the review page is HTML; name a .html file")
    with hold_work_dir(work_dir, wait=True, rep=rep):
        return write_review(work_dir, report, page, rep.warn)
