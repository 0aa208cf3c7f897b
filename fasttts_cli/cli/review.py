"""`fasttts review WORK_DIR`: a dub's review page written again from its work folder (no synthesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.progress import Reporter
from fasttts_cli.cli.shared import EXIT_CODES_HELP, Job, command


@command("review", epilog=EXIT_CODES_HELP)
def review(
    work_dir: Annotated[
        Path, typer.Argument(help="A dub's work folder (<stem>.fasttts/, or its --work-dir).")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Where to write the page (default: where the dub wrote it, <output stem>.review.html).",
        ),
    ] = None,
) -> Job:
    """Write the review page (timeline, players, line table, retake command) from a dub's work folder."""
    from fasttts_cli.app.review import review_work_dir

    def body(rep: Reporter) -> dict[str, Any]:
        page = review_work_dir(work_dir, output, rep)
        return {"command": "review", "ok": True, "outputs": {"review": str(page.path)}, **page.to_json()}

    def human(r: dict[str, Any]) -> None:
        print(f"wrote {r['page']} ({r['bytes'] / 1024:.0f} KB, {r['lines']} lines)")

    return body, human
