"""Soft subtitles are never the default track unless --default-subtitles: MP4 (where ffmpeg enables the
only subtitle track whatever its disposition, patched in the track header) and MKV alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.media.mp4_tracks import disable_tracks
from fasttts_cli.media.mux import mux
from fasttts_cli.media.probe import probe

VIDEO = Path(__file__).resolve().parents[1] / "samples" / "demo.mp4"


@pytest.fixture()
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    dub = tmp_path / "dub.wav"
    info = probe(VIDEO)
    n = int(info.duration * 48000)
    sf.write(dub, (0.05 * np.sin(np.arange(n) * 0.05)).astype(np.float32), 48000, subtype="FLOAT")
    srt = tmp_path / "dub.srt"
    srt.write_text("1\n00:00:01,000 --> 00:00:02,000\nHello.\n", encoding="utf-8")
    return dub, srt


@pytest.mark.parametrize("ext", [".mp4", ".mkv", ".mov"])
@pytest.mark.parametrize("default", [False, True])
def test_subtitle_track_default_only_when_asked(tmp_path: Path, inputs, ext: str, default: bool):
    dub, srt = inputs
    out = mux(VIDEO, dub, tmp_path / f"out{ext}", lang="eng", subtitles=srt, default_subtitles=default)
    info = probe(out)
    (sub,) = info.subtitle_streams
    assert sub.default is default
    assert info.audio_streams[0].default  # the dub track stays the default audio


def test_disable_tracks_leaves_a_file_without_text_tracks_alone(tmp_path: Path):
    copy = tmp_path / "v.mp4"
    copy.write_bytes(VIDEO.read_bytes())
    assert disable_tracks(copy) == 0
    assert copy.read_bytes() == VIDEO.read_bytes()
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00\x00\x00\x01not an mp4 at all")
    assert disable_tracks(junk) == 0
