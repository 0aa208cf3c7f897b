"""The cast in a dub job: which speakers take their reference from `--cast FILE`, which are cut from the
source audio (`--voice [NAME=]from-video`), building those into the work folder (casting.build), and each
line's own cue audio as its emotion reference (`--emotion-from-line`, casting.cue_clips).

Who wins, per speaker: its own `--voice NAME=PATH` (or `NAME=from-video`), then the `--cast` file's entry,
then `--voice from-video` (every speaker), then the default `--voice PATH`. For the lines without a
speaker: `--voice PATH`, then the cast's `default` entry, then `--voice from-video`.

The source audio is `--dialogue-stem` when given (the dialogue alone, separated by the user's own tool),
else the `--video`'s own audio.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fasttts_cli.casting.build import DEFAULT_NAME
from fasttts_cli.casting.castfile import CastEntry
from fasttts_cli.dubbing.speakers import VoiceMap, speaker_key, speakers_found
from fasttts_cli.errors import UsageError
from fasttts_cli.synth.synthesizer import EmotionSpec

STEM_TOLERANCE = 0.5  # seconds a dialogue stem may differ from the video's length (container rounding)
_PLACEHOLDER = "(from-video: {})"


@dataclass
class CastState:
    """The job's cast: what is to be cut from the source, what came from --cast, what was written."""

    source: Path | None  # the audio references and per-line emotion are cut from
    source_flag: str  # "--dialogue-stem" or "--video"
    pending: dict[Path, str | None] = field(default_factory=dict)  # placeholder -> speaker (None: unlabeled)
    reused: list[CastEntry] = field(default_factory=list)  # --cast entries some speaker uses
    built: list[CastEntry] = field(default_factory=list)
    cast_file: Path | None = None  # <work>/cast.toml once written
    emotion_clips: dict[int, Path | None] = field(default_factory=dict)  # line -> clip (None: fallback)
    warnings: list[str] = field(default_factory=list)  # flags that had nothing to act on
    # The source decoded once (mono at REF_SR) for both the references and the emotion clips; dropped once
    # the clips are cut (a film's audio is hundreds of MB).
    audio: Any = field(default=None, repr=False)

    def source_audio(self) -> Any:
        from fasttts_cli.casting.build import load_source

        assert self.source is not None
        if self.audio is None:
            self.audio = load_source(self.source)
        return self.audio

    @property
    def active(self) -> bool:
        return bool(self.pending or self.reused or self.built)


def source_of(o: Any) -> tuple[Path | None, str]:
    if o.dialogue_stem is not None:
        return o.dialogue_stem, "--dialogue-stem"
    if o.video is not None:
        return o.video, "--video"
    return None, ""


def check_sources(o: Any, media: Any, untimed: bool, vm: VoiceMap) -> None:
    """--dialogue-stem exists and lasts as long as the video; what needs timed cues has them."""
    from fasttts_cli.media.probe import probe

    if o.dialogue_stem is not None:
        if not Path(o.dialogue_stem).is_file():
            raise UsageError(f"--dialogue-stem {o.dialogue_stem}: no such file")
        stem = probe(o.dialogue_stem, check_complete=True)
        if not stem.audio_streams:
            raise UsageError(f"--dialogue-stem {o.dialogue_stem}: holds no audio")
        if media is not None and stem.duration > 0 and media.duration > 0:
            gap = abs(stem.duration - media.duration)
            if gap > STEM_TOLERANCE:
                raise UsageError(
                    f"--dialogue-stem {o.dialogue_stem}: {stem.duration:.2f} s long, but the video "
                    f"{o.video} lasts {media.duration:.2f} s (they must match within {STEM_TOLERANCE} s)",
                    hint="export the stem from the same cut of the programme as the video",
                )
    elif media is not None and not media.audio_streams and (o.emotion_from_line or vm.from_video):
        raise UsageError(
            f"--video {o.video} has no audio track to cut references or emotion from",
            hint="pass the dialogue as --dialogue-stem PATH, or reference files as --voice NAME=PATH",
        )
    if untimed and o.emotion_from_line:
        raise UsageError(f"--emotion-from-line: {o.script} has no cue times to cut each line's audio by")


def resolve_voices(
    o: Any, cues: list[Any], vm: VoiceMap, untimed: bool = False
) -> tuple[VoiceMap, CastState]:
    """`vm` with the --cast references and a placeholder for each speaker to cut from the source (replaced
    by `build_job_cast`), and the job's CastState."""
    from fasttts_cli.casting.castfile import read_cast

    source, flag = source_of(o)
    state = CastState(source, flag)
    if vm.from_video and source is None:
        raise UsageError(
            "--voice from-video needs --video (or --dialogue-stem): the references are cut from its audio",
            hint="add --video FILE, or give reference files as --voice NAME=PATH",
        )
    if vm.from_video and untimed:
        raise UsageError(f"--voice from-video: {o.script} has no cue times to find each speaker's speech by")
    entries = read_cast(o.cast) if o.cast is not None else []
    cast_by_key = {speaker_key(e.name): e for e in entries}
    own = {speaker_key(n) for n in vm.named}
    own_video = {speaker_key(n) for n in vm.from_video if n is not None}
    every = None in vm.from_video
    named, default = dict(vm.named), vm.default
    used: dict[str, CastEntry] = {}

    def pending(name: str | None) -> Path:
        ph = Path(_PLACEHOLDER.format(name or "lines without a speaker"))
        state.pending[ph] = name
        return ph

    for key, (name, _) in speakers_found(cues).items():
        if key is None:
            entry = cast_by_key.get(speaker_key(DEFAULT_NAME))
            if default is not None:
                continue
            if entry is not None:
                default, used[entry.name] = entry.reference, entry
            elif every:
                default = pending(None)
            continue
        assert name is not None
        if key in own:
            continue
        if key in own_video:
            named[name] = pending(name)
        elif key in cast_by_key:
            entry = cast_by_key[key]
            named[name], used[entry.name] = entry.reference, entry
        elif every:
            named[name] = pending(name)
    # A NAME=from-video that matches no speaker stays a placeholder: voice_name_problems warns about it.
    for n in vm.from_video:
        if n is not None and not any(speaker_key(k) == speaker_key(n) for k in named):
            named[n] = Path(_PLACEHOLDER.format(n))
    state.reused = list(used.values())
    if o.cast is not None and not used:
        names = ", ".join(e.name for e in entries[:12])
        state.warnings.append(f"--cast {o.cast}: names none of the script's speakers (it has {names})")
    if o.dialogue_stem is not None and not (vm.from_video or o.emotion_from_line):
        state.warnings.append(
            f"--dialogue-stem {o.dialogue_stem} is not used: it is the source of --voice from-video "
            "references and --emotion-from-line clips, and neither is given"
        )
    return VoiceMap(default=default, named=named, from_video=vm.from_video), state


def is_placeholder(path: Path | None) -> bool:
    """A reference still to be cut from the source (never a file to open)."""
    return path is not None and str(path).startswith(_PLACEHOLDER.split("{")[0])


def build_job_cast(job: Any, rep: Any, work_dir: Path, *, keep_source: bool = False) -> Any:
    """Cut the pending references into `work_dir/cast/`, write `work_dir/cast.toml` (those and the --cast
    entries used) and return the job with the real reference paths in its voice map. `keep_source`: keep
    the decoded source for the emotion clips (line_emotions)."""
    from fasttts_cli.casting.build import build_cast, write_work_cast

    state: CastState | None = job.cast
    if state is None or not state.active:
        return job
    if state.pending:
        assert state.source is not None
        speakers = list(state.pending.values())
        flag = "--voice from-video" if None in job.voices.from_video else "--voice NAME=from-video"
        with rep.stage("cast"):
            state.built = build_cast(
                job.cues, speakers, state.source, work_dir, flag=flag, audio=state.source_audio()
            )
        if not keep_source:
            state.audio = None
        real = {ph: e.reference for ph, e in zip(state.pending, state.built, strict=True)}
        vm = job.voices
        named = {n: real.get(p, p) for n, p in vm.named.items()}
        default = real.get(vm.default, vm.default) if vm.default is not None else None
        job = replace(job, voices=VoiceMap(default=default, named=named, from_video=vm.from_video))
        for e in state.built:
            rep.info(
                f"cast: {e.name}: {e.seconds:.1f} s reference from {len(e.spans)} span(s) of "
                f"{state.source} (score {e.score:.1f} dB) -> {e.reference}"
            )
    built_names = {e.name for e in state.built}
    state.cast_file = write_work_cast(
        work_dir, state.built + [e for e in state.reused if e.name not in built_names]
    )
    return job


def line_emotions(o: Any, rep: Any, job: Any, work_dir: Path) -> dict[int, EmotionSpec]:
    """--emotion-from-line: line -> its emotion spec (its own cue clip), clips cut into `work_dir/emotion/`;
    lines whose cue holds too little speech are left out (they keep the speaker's reference)."""
    from fasttts_cli.casting.build import REF_SR
    from fasttts_cli.casting.cue_clips import MIN_SPEECH, write_cue_clips
    from fasttts_cli.casting.reference import programme_levels
    from fasttts_cli.casting.spans import cue_spans

    state: CastState = job.cast
    if not o.emotion_from_line or state.source is None:
        return {}
    with rep.stage("emotion"):
        x = state.source_audio()
        spans = cue_spans(job.cues)
        state.emotion_clips = write_cue_clips(
            x, REF_SR, spans, programme_levels(x, REF_SR), work_dir / "emotion"
        )
        state.audio = None
    alpha = o.emotion.alpha if o.emotion is not None else 1.0
    fallbacks = [i for i, p in state.emotion_clips.items() if p is None]
    if fallbacks:
        from fasttts_cli.app.job import format_ranges

        which = f"line{'s' if len(fallbacks) > 1 else ''} {format_ranges(fallbacks)}"
        rep.warn(
            f"--emotion-from-line: {which}: under {MIN_SPEECH} s of speech in the cue audio "
            f"({state.source}); the speaker's reference is the emotion source instead"
        )
    clips = state.emotion_clips.items()
    return {i: EmotionSpec(audio=p, alpha=alpha, audio_sha256=p.stem) for i, p in clips if p is not None}


def draft_notice(job: Any) -> str | None:
    """With the draft voice: the cast was still built and written, but Piper does not clone."""
    state: CastState | None = job.cast
    if state is None or state.cast_file is None:
        return None
    return (
        f"the cast was built and written to {state.cast_file}, but the draft voice (Piper) does not clone: "
        "its references take effect with an IndexTTS-2 engine (--engine or $FASTTTS_ENGINE)"
    )


def add_cast_report(report: dict[str, Any], job: Any, lines: list[Any]) -> None:
    """report.json's `cast` table, the `emotion_*` counts of its summary (the --json `lines`) and each
    line's timbre and emotion references."""
    state: CastState | None = job.cast
    clips = state.emotion_clips if state is not None else {}
    ids = [ln.index for ln in lines]
    report["summary"]["emotion_from_line"] = sum(1 for i in ids if clips.get(i) is not None)
    report["summary"]["emotion_fallbacks"] = sum(1 for i in ids if i in clips and clips[i] is None)
    voice_of = {ln.index: ln.voice for ln in lines}
    for entry in report["lines"]:
        i = entry["index"]
        entry["reference"] = str(voice_of[i])
        entry["emotion_reference"] = str(clips[i]) if clips.get(i) is not None else None
        entry["emotion_fallback"] = i in clips and clips[i] is None
    report["cast"] = cast_json(state)


def cast_json(state: CastState | None) -> dict[str, Any] | None:
    if state is None or state.cast_file is None:
        return None
    built = {e.name for e in state.built}
    return {
        "file": str(state.cast_file),
        "source": str(state.source) if state.source is not None else None,
        "speakers": {
            e.name: {
                "reference": str(e.reference),
                "from": "source" if e.name in built else "cast",
                "seconds": e.seconds,
                "score": e.score,
                "spans": [list(s) for s in e.spans],
            }
            for e in state.built + [e for e in state.reused if e.name not in built]
        },
    }
