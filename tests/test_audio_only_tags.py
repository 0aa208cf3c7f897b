"""Audio-only dubs carry the dub's language and title, like the dub track of a video (.m4a was `und`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.audio.blockio import export_audio
from fasttts_cli.media.probe import probe


@pytest.mark.parametrize("ext", [".m4a", ".mp3", ".opus"])
def test_encoded_audio_is_tagged_with_the_language(tmp_path: Path, ext: str):
    src = tmp_path / "dub.wav"
    t = np.arange(48000) / 48000
    sf.write(src, (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 48000, subtype="FLOAT")
    out = export_audio(src, tmp_path / f"ep.spa{ext}", lang="es", title="Dub (spa) — fasttts")
    if ext == ".mp3":
        # ID3v2 TLAN frame (ffmpeg's demuxer does not show it): id, 4-byte size, 2 flags, encoding, text.
        head = out.read_bytes()[:512]
        assert head.startswith(b"ID3") and b"TLAN" in head
        assert head[head.index(b"TLAN") + 11 : head.index(b"TLAN") + 14] == b"spa"
    else:
        assert probe(out).audio_streams[0].language == "spa"


def test_und_adds_no_language_tag(tmp_path: Path):
    src = tmp_path / "dub.wav"
    sf.write(src, np.zeros(48000, dtype=np.float32), 48000, subtype="FLOAT")
    out = export_audio(src, tmp_path / "ep.und.m4a", lang="und")
    assert probe(out).audio_streams[0].language is None


def test_with_a_video_an_audio_output_is_the_dub_alone_timed_to_the_video(tmp_path: Path):
    from fasttts_cli.app.pipeline import DubOptions, run_dub
    from fasttts_cli.errors import UsageError
    from tests.test_pipeline import FakeSynth

    root = Path(__file__).resolve().parents[1] / "samples"
    video = root / "demo.mp4"
    opts = DubOptions(
        script=root / "demo.srt",
        voices=[str(root / "voices" / "alice.wav")],
        video=video,
        lang="eng",
        output=tmp_path / "dub.wav",
    )
    res = run_dub(opts, synthesizer=FakeSynth())
    assert set(res.outputs) >= {"audio", "subtitles"} and "video" not in res.outputs
    info = sf.info(res.outputs["audio"])
    assert abs(info.frames / info.samplerate - probe(video).duration) < 0.05
    opts.mix = "keep"
    with pytest.raises(UsageError, match="--mix keep"):
        run_dub(opts, synthesizer=FakeSynth())
