"""`fasttts cast VIDEO SUBS`: who speaks when, for subtitles without speaker labels.

Stages (each timed in the result's `timings`): load the speaker encoder (the configured engine's CAM++, else
Resemblyzer), decode the video's audio at 16 kHz, embed each timed cue's audio, cluster the embeddings
(casting.cluster states the rule and the confidence), and with `-o FILE` write the subtitles back labeled
SPEAKER_1..N (format from FILE's extension) and `<FILE stem>.cast.toml` beside it, whose references are cut
from each speaker's own cues as `--voice NAME=from-video` cuts them, under `<FILE stem>.cast/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttts_cli.app.progress import Reporter
from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.errors import InputError, MissingDependencyError, UsageError

SPEAKER = "SPEAKER_{}"
# Output extension -> the format written (README, `fasttts cast`).
LABELED_FORMATS = {".ass": "ass", ".ssa": "ssa", ".vtt": "vtt", ".tsv": "tsv", ".csv": "csv"}


@dataclass
class CastOptions:
    """The flags of `fasttts cast` (None: not given)."""

    video: Path
    subtitles: Path
    output: Path | None  # -o
    speakers: int | None  # --speakers (None: found)
    engine: str | None  # --engine (None: $FASTTTS_ENGINE, else the draft voice -> Resemblyzer)
    preset: str | None
    input_format: str | None  # --format
    encoding: str | None
    styles: str | None  # ASS/SSA --styles
    separate: bool = False  # --separate: the dialogue stem is the source, not the video's mix
    separation_model: Path | None = None


def cast_path_for(output: Path) -> Path:
    return output.with_name(f"{output.stem}.cast.toml")


def _timed_cues(opts: CastOptions) -> tuple[list[Cue], Any]:
    from fasttts_cli.dubbing.readers import parse_styles, read_script_full

    # Overlapping cues are allowed: two people talking at once is exactly what unlabeled subtitles hold.
    got = read_script_full(
        opts.subtitles,
        fmt=opts.input_format,
        styles=parse_styles(opts.styles),
        encoding=opts.encoding,
        allow_overlap=True,
    )
    spoken = [c for c in got.cues if c.text.strip()]
    if spoken and not any(c.timed for c in spoken):
        raise InputError(
            opts.subtitles,
            "has no timings: `fasttts cast` cuts each cue's audio from the video by its times",
            hint="give timed subtitles (.srt .vtt .ass .tsv/.csv with start and end)",
        )
    cues = [c for c in spoken if c.timed and c.end > c.start]  # type: ignore[operator]
    if len(cues) < 2:
        raise InputError(
            opts.subtitles,
            f"only {len(cues)} timed cue(s) with text: telling speakers apart needs at least 2",
        )
    return cues, got


def _check(opts: CastOptions, n_cues: int) -> str | None:
    if not opts.video.exists():
        raise InputError(opts.video, "no such file", hint="VIDEO is the video (or audio) the subtitles time")
    if opts.speakers is not None and not 1 <= opts.speakers <= n_cues:
        raise UsageError(
            f"--speakers {opts.speakers}: must be between 1 and the number of cues ({n_cues})",
            hint="leave it out to find the number of speakers automatically",
        )
    if opts.output is None:
        return None
    kind = LABELED_FORMATS.get(opts.output.suffix.lower())
    if opts.output.suffix.lower() == ".srt":
        raise UsageError(
            f"-o {opts.output}: SRT has no place for a speaker",
            hint=f"write {opts.output.with_suffix('.vtt').name} (WebVTT <v NAME>) or .ass, .tsv, .csv",
        )
    if kind is None:
        raise UsageError(
            f"-o {opts.output}: cannot tell the format from {opts.output.suffix or 'no extension'!r}",
            hint=f"end it in one of {', '.join(LABELED_FORMATS)}",
        )
    try:
        opts.output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"-o {opts.output}: cannot make its folder: {e.strerror or e}") from None
    from fasttts_cli.app.job import check_writable

    # Checked now, before the encoder loads and the cues are embedded: not after the work is done.
    if opts.output.is_dir() or cast_path_for(opts.output).is_dir():
        raise UsageError(f"-o {opts.output}: a folder is in the way of the file (or of its .cast.toml)")
    check_writable(opts.output.parent, "-o")
    return kind


def load_encoder(engine: str | None, preset: str | None, rep: Reporter) -> tuple[Any, str, Any]:
    """(encoder, description, what to close): the engine's CAM++ when one is configured, else Resemblyzer.
    A random-weight engine's CAM++ tells nobody apart: Resemblyzer stands in for it where installed."""
    from importlib.util import find_spec

    from fasttts_cli.casting.embed import ResemblyzerEncoder, StyleEncoder
    from fasttts_cli.synth.engine_select import DRAFT, select_engine

    resemblyzer = "resemblyzer (GE2E, bundled weights)"
    selection = select_engine(engine)
    if selection.kind == DRAFT:
        return ResemblyzerEncoder(), resemblyzer, None
    from fasttts_cli.app.engine_load import engine_random_weights, load_synthesizer

    if engine_random_weights(selection):
        if find_spec("resemblyzer") is not None:
            rep.warn(
                f"engine {selection.path} has random weights: Resemblyzer tells the speakers apart instead"
            )
            return ResemblyzerEncoder(), resemblyzer, None
        rep.warn(
            f"engine {selection.path} has random weights: its CAM++ embeddings, and so the speakers "
            "found, mean nothing (install the `cast` extra for Resemblyzer)"
        )
    synth = load_synthesizer(selection, preset)
    style = getattr(getattr(synth, "engine", None), "style", None)
    if style is None:
        synth.close()
        raise MissingDependencyError(
            f"engine {selection.path}: it has no CAM++ speaker encoder to tell speakers apart",
            hint="use an IndexTTS-2 engine folder, or --engine draft for Resemblyzer",
        )
    return StyleEncoder(style), f"campplus ({selection.kind} engine {selection.path})", synth


def labeled_text(kind: str, cues: list[Cue], header: str | None = None) -> str:
    """Subtitles with each cue's speaker in the format's own place: ASS/SSA Name, WebVTT `<v NAME>`, the
    TSV/CSV speaker column."""
    from fasttts_cli.dubbing.subtitles_out import SubtitleEntry, format_subtitles, format_table

    entries = [
        SubtitleEntry(
            c.start,  # type: ignore[arg-type]
            c.end,  # type: ignore[arg-type]
            c.text,
            c.speaker,
            c.style,
        )
        for c in cues
    ]
    if kind in ("tsv", "csv"):
        return format_table(entries, kind)
    return format_subtitles(kind, entries, header=header if kind in ("ass", "ssa") else None)


def _write(
    opts: CastOptions,
    kind: str,
    cues: list[Cue],
    names: list[str],
    conf: list[float],
    header: str | None,
    rep: Reporter,
    source: Any,
    origin: Path,
) -> tuple[Path, Path | None, dict[str, Any]]:
    from dataclasses import replace

    from fasttts_cli.casting.build import build_cast
    from fasttts_cli.casting.castfile import write_cast
    from fasttts_cli.casting.reference import MIN_SECONDS
    from fasttts_cli.dubbing.cache import atomic_write_text

    assert opts.output is not None
    labeled = [replace(c, speaker=n) for c, n in zip(cues, names, strict=True)]
    subs = atomic_write_text(opts.output, labeled_text(kind, labeled, header))
    short: dict[str, float] = {}
    order = sorted(set(names), key=lambda n: int(n.rsplit("_", 1)[1]))
    cast_entries = build_cast(
        labeled,
        order,
        origin,
        opts.output.parent,
        flag="fasttts cast",
        ref_dir=opts.output.parent / f"{opts.output.stem}.cast",
        on_short=lambda name, found: short.__setitem__(name, round(found, 2)),
        audio=source,
    )
    for name, found in short.items():
        rep.warn(
            f"{name}: only {found} s of clean speech with no other speaker overlapping (a reference needs "
            f"{MIN_SECONDS:g} s): left out of the cast file; give it a voice with --voice {name}=FILE"
        )
    with_cues = []
    for e in cast_entries:
        mine = [i for i, n in enumerate(names) if n == e.name]
        extra = {"cues": [cues[i].index for i in mine], "confidence": [conf[i] for i in mine]}
        with_cues.append(replace(e, extra=extra))
    if not with_cues:
        rep.warn(f"no speaker has {MIN_SECONDS:g} s of clean solo speech: no cast file written")
        return subs, None, {}
    cast = write_cast(cast_path_for(opts.output), with_cues)
    refs = {
        e.name: {"reference": str(e.reference), "seconds": e.seconds, "score": e.score} for e in with_cues
    }
    return subs, cast, refs


def _heard(opts: CastOptions, cues: list[Cue], audio: Any) -> tuple[list[int], dict[int, str]]:
    """(positions of the cues with audio to embed, why each other one has none); exit 2 when the whole
    track is silent (naming the video) or fewer than two cues are heard (naming them)."""
    from fasttts_cli.casting.embed import SILENCE_DBFS, silent, unheard_cues

    if silent(audio):
        raise InputError(
            opts.video,
            f"its audio is silent (under {SILENCE_DBFS:g} dBFS): no speech to tell speakers apart by",
            hint="VIDEO's first audio track is read: check it holds the dialogue (not a muted track)",
        )
    unheard = unheard_cues(audio, cues)
    heard = [k for k in range(len(cues)) if k not in unheard]
    _enough(opts, cues, heard, unheard)
    return heard, unheard


def _enough(opts: CastOptions, cues: list[Cue], heard: list[int], unheard: dict[int, str]) -> None:
    if len(heard) >= 2 and (opts.speakers is None or opts.speakers <= len(heard)):
        return
    why = "; ".join(f"cue {cues[k].index}: {r}" for k, r in list(unheard.items())[:5])
    more = f" (and {len(unheard) - 5} more)" if len(unheard) > 5 else ""
    if len(heard) < 2:
        raise InputError(
            opts.subtitles,
            f"only {len(heard)} of {len(cues)} cues have speech in {opts.video} to embed: {why}{more}",
            hint="are these the subtitles of this video (and their times in its time base)?",
        )
    raise UsageError(
        f"--speakers {opts.speakers}: only {len(heard)} cues have speech to embed ({why}{more})",
        hint="ask for fewer speakers, or leave --speakers out",
    )


def _finite(
    opts: CastOptions, cues: list[Cue], heard: list[int], unheard: dict[int, str], emb: Any
) -> tuple[list[int], Any]:
    """Sets aside the cues the encoder could not embed (a non-finite vector clusters as a speaker)."""
    import numpy as np

    ok = np.isfinite(emb).all(axis=1)
    for k, good in zip(heard, ok, strict=True):
        if not good:
            unheard[k] = "no voice the encoder could embed"
    heard = [k for k, good in zip(heard, ok, strict=True) if good]
    _enough(opts, cues, heard, unheard)
    return heard, emb[ok]


def _everyone(found: Any, heard: list[int], cues: list[Cue], unheard: dict[int, str], rep: Reporter) -> Any:
    """The clustering of the heard cues extended to every cue: a cue with no speech takes the speaker of
    the nearest heard cue in time, with confidence 0 (a toss-up: nothing was heard), and is warned about."""
    from dataclasses import replace

    if not unheard:
        return found
    labels, conf = [0] * len(cues), [0.0] * len(cues)
    for k, lab, c in zip(heard, found.labels, found.confidence, strict=True):
        labels[k], conf[k] = lab, c
    for k in unheard:
        near = min(heard, key=lambda h: abs(float(cues[h].start) - float(cues[k].start)))  # type: ignore[arg-type]
        labels[k] = labels[near]
    order: dict[int, int] = {}  # speakers numbered by their first cue again, the unheard ones counted
    labels = [order.setdefault(lab, len(order)) for lab in labels]
    listed = ", ".join(str(cues[k].index) for k in list(unheard)[:10]) + (" ..." if len(unheard) > 10 else "")
    reasons = sorted(set(unheard.values()))
    rep.warn(
        f"{len(unheard)} cue(s) have no speech to embed ({'; '.join(reasons)}): cues {listed}; each is "
        "given the speaker of the nearest cue in time, with confidence 0"
    )
    return replace(found, labels=labels, confidence=conf)


def run_cast(opts: CastOptions, rep: Reporter) -> dict[str, Any]:
    from fasttts_cli.audio.load import resample
    from fasttts_cli.casting.build import REF_SR, load_source
    from fasttts_cli.casting.cluster import cluster_speakers
    from fasttts_cli.casting.embed import EMBED_SR, embed_cues

    cues, got = _timed_cues(opts)
    kind = _check(opts, len(cues))
    from fasttts_cli.app.separation import cast_source

    # Before the encoder loads: the separation model and the encoder are never in memory together.
    origin = cast_source(opts.video, opts.separate, opts.separation_model, rep)
    with rep.stage("load_encoder"):
        encoder, described, closer = load_encoder(opts.engine, opts.preset, rep)
    try:
        with rep.stage("decode"):
            # Decoded once, streamed to mono (a film's 5.1 track is never in memory whole): the references
            # are cut from it, the embeddings read it at their own rate.
            source = load_source(origin)
            audio = resample(source, REF_SR, EMBED_SR)
        heard, unheard = _heard(opts, cues, audio)
        with rep.stage("embed"):
            emb = embed_cues(audio, [cues[k] for k in heard], encoder)
    finally:
        if closer is not None:
            closer.close()
    heard, emb = _finite(opts, cues, heard, unheard, emb)
    with rep.stage("cluster"):
        found = _everyone(cluster_speakers(emb, opts.speakers), heard, cues, unheard, rep)
    names = [SPEAKER.format(lab + 1) for lab in found.labels]
    outputs: dict[str, str | None] = {"subtitles": None, "cast": None}
    refs: dict[str, Any] = {}
    if kind is not None:
        with rep.stage("write"):
            subs, cast, refs = _write(
                opts, kind, cues, names, found.confidence, got.header, rep, source, origin
            )
        outputs = {"subtitles": str(subs), "cast": None if cast is None else str(cast)}
    speakers = {
        SPEAKER.format(j + 1): {
            "cues": names.count(SPEAKER.format(j + 1)),
            **refs.get(SPEAKER.format(j + 1), {}),
        }
        for j in range(found.speakers)
    }
    return {
        "ok": True,
        "command": "cast",
        "video": str(opts.video),
        "source": str(origin),  # what was embedded and cut: the video, or its separated dialogue stem
        "subtitles": str(opts.subtitles),
        "encoder": described,
        "speakers": found.speakers,
        "rule": found.rule,
        "silhouettes": {str(k): v for k, v in found.silhouettes.items()},
        "cast": speakers,
        "cues": [
            {
                "index": c.index,
                "start": c.start,
                "end": c.end,
                "speaker": n,
                "confidence": conf,
                "text": c.text,
            }
            for c, n, conf in zip(cues, names, found.confidence, strict=True)
        ],
        "outputs": outputs,
        "warnings": [*got.warnings, *rep.warnings],
        "timings": rep.timings,
    }
