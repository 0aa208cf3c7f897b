"""`--separate` in a job: the source's dialogue and music-and-effects stems (separation.stems), then used
as if the user had passed them: the M&E stem as `--background` under the dub (`--mix background`), the
dialogue stem as `--dialogue-stem`, the source of `--voice from-video` references, `--emotion-from-line`
clips and `fasttts cast`'s embeddings. One code path for both: what `--dialogue-stem` does is what the
separated stem does.

The stems live in `<work>/stems/<content>-<model>/` (dub) or `<video stem>.fasttts/stems/` beside the video
(cast: the folder a dub of that video uses by default), so any later run on the same video reuses them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from fasttts_cli.app.progress import Reporter
from fasttts_cli.errors import UsageError


def check_options(o: Any) -> None:
    """Flag combinations `--separate` cannot take (each message names the flags); then the model and demucs
    are located (exit 3 naming `fasttts download --separation`) before anything slow runs."""
    if not o.separate:
        if o.separation_model is not None:
            raise UsageError(f"--separation-model {o.separation_model} is only used with --separate")
        return
    if o.video is None:
        raise UsageError("--separate needs --video: it is the video's own audio that is separated")
    if o.dialogue_stem is not None:
        raise UsageError(
            f"--separate and --dialogue-stem {o.dialogue_stem}: give one of them, not both",
            hint="--separate makes the dialogue stem from the video; --dialogue-stem is one you made",
        )
    if o.background is not None:
        raise UsageError(
            f"--separate and --background {o.background}: give one of them, not both",
            hint="--separate makes the music-and-effects stem from the video; --background is one you made",
        )


def locate_model(flag: Path | None) -> Any:
    from fasttts_cli.separation.model import locate, require_demucs

    require_demucs()
    return locate(flag)


def separate_source(source: Path, root: Path, model_flag: Path | None, rep: Reporter) -> Any:
    """separation.stems.Stems for `source` under `root`, timed as the `separate` stage with block
    progress; a reused separation is said so."""
    from fasttts_cli.separation.stems import separate

    files = locate_model(model_flag)
    with rep.stage("separate"):
        stems = separate(
            source, root, files, progress=lambda k, n: rep.stage_progress("separate", k, n, unit="blocks")
        )
    if stems.cached:
        rep.info(f"separate: stems of {source} reused from {stems.folder}")
    else:
        again = f", {stems.reused} block(s) kept from an interrupted run" if stems.reused else ""
        rep.info(
            f"separate: {source} ({stems.seconds:.1f} s) -> {stems.dialogue.name}, "
            f"{stems.background.name} in {stems.folder} ({stems.computed} block(s) separated{again})"
        )
    rep.event("separate", **stems.to_json())
    return stems


def apply_to_job(o: Any, rep: Reporter, job: Any, work_dir: Path) -> tuple[Any, Any]:
    """With --separate: (options, job) as if `--dialogue-stem DIALOGUE` and, under `--mix background`,
    `--background M&E` had been given (the job's cast reads the dialogue stem)."""
    if not o.separate:
        return o, job
    cast = job.cast
    reads_dialogue = cast is not None and bool(cast.pending or o.emotion_from_line)
    if o.mix != "background" and not reads_dialogue:
        rep.warn(
            f"--separate is not used: --mix {o.mix}, and no --voice from-video or --emotion-from-line "
            "reads the dialogue; nothing was separated"
        )
        return o, job
    if o.dry_run:
        stems = _cached(o.video, work_dir / "stems", o.separation_model)
        if stems is None:
            if not reads_dialogue:
                return o, job
            rep.warn(
                "--dry-run runs no model: the stems are not separated yet, so the cast is checked on the "
                f"video's mixed audio ({o.video}); the real run cuts it from the dialogue stem"
            )
            return o, job
    else:
        stems = separate_source(o.video, work_dir / "stems", o.separation_model, rep)
    o = replace(
        o, dialogue_stem=stems.dialogue, background=stems.background if o.mix == "background" else None
    )
    if cast is not None and cast.source is not None:
        cast.source, cast.source_flag, cast.audio = stems.dialogue, "--separate", None
    job.separation = stems.to_json()
    return o, job


def _cached(source: Path, root: Path, model_flag: Path | None) -> Any:
    """Stems an earlier run left for `source`, found without loading the model (None: not separated)."""
    from fasttts_cli.separation.stems import cached_stems, stems_folder

    return cached_stems(stems_folder(source, root, locate_model(model_flag)))


def cast_source(video: Path, separate: bool, model_flag: Path | None, rep: Reporter) -> Path:
    """`fasttts cast --separate`: the dialogue stem of `video` (cached where a dub of it looks), else the
    video itself."""
    if not separate:
        if model_flag is not None:
            raise UsageError(f"--separation-model {model_flag} is only used with --separate")
        return video
    from fasttts_cli.app.job import check_writable
    from fasttts_cli.dubbing.cache import work_dir_for

    root = work_dir_for(video.stem, video.parent) / "stems"
    check_writable(root, "--separate (the stems go beside the video)")
    return separate_source(video, root, model_flag, rep).dialogue
