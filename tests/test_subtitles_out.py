"""Re-timed subtitles come out in the input's format, with line breaks, speakers and styles kept, and read
back the same through our readers and the reference libraries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pysubs2
import pytest
import soundfile as sf

from fasttts_cli.app.pipeline import DubOptions, run_dub
from fasttts_cli.dubbing.readers import read_script_full
from fasttts_cli.dubbing.readers_ass import ass_header
from fasttts_cli.dubbing.subtitles_out import SubtitleEntry, format_subtitles, subtitle_format
from tests.test_pipeline import FakeSynth

ENTRIES = [
    SubtitleEntry(1.0, 2.5, "Take the flashlight,\nthe one with new batteries.", "ALICE", "Default"),
    SubtitleEntry(3.0, 4.25, "Fish & chips <now> --> later", "BOB", "Italics"),
    SubtitleEntry(5.0, 6.0, "No speaker {here}.", None, None),
]


@pytest.mark.parametrize("kind", ["srt", "vtt", "ass", "ssa"])
def test_each_format_reads_back_with_times_breaks_and_speakers(tmp_path: Path, kind: str):
    path = tmp_path / f"out.{kind}"
    path.write_text(format_subtitles(kind, ENTRIES), encoding="utf-8")
    got = read_script_full(path)
    assert [(c.start, c.end) for c in got.cues] == [(e.start, e.end) for e in ENTRIES]
    assert got.cues[0].text == "Take the flashlight,\nthe one with new batteries."
    if kind in ("vtt", "ass", "ssa"):
        assert [c.speaker for c in got.cues] == ["ALICE", "BOB", None]
    if kind in ("ass", "ssa"):
        assert [c.style for c in got.cues] == ["Default", "Italics", "Default"]
        subs = pysubs2.SSAFile.from_string(path.read_text(encoding="utf-8"))
        assert [e.start for e in subs.events] == [1000, 3000, 5000]
        assert subs.events[0].text == "Take the flashlight,\\Nthe one with new batteries."
    if kind == "vtt":
        assert "Fish &amp; chips &lt;now&gt; --&gt; later" in path.read_text(encoding="utf-8")
        assert got.cues[1].text == "Fish & chips <now> --> later"


def test_ass_keeps_the_scripts_header_and_styles():
    src = (Path(__file__).resolve().parents[1] / "samples" / "demo.ass").read_text(encoding="utf-8")
    header = ass_header(src)
    assert header is not None and "[V4+ Styles]" in header and "[Events]" not in header
    out = format_subtitles("ass", ENTRIES[:1], header=header)
    assert out.startswith(header.rstrip("\n")) and out.count("[Events]") == 1


def test_tables_and_text_get_srt():
    assert [subtitle_format(k) for k in ("txt", "tsv", "csv", "jsonl", "srt", "vtt", "ass")] == [
        "srt",
        "srt",
        "srt",
        "srt",
        "srt",
        "vtt",
        "ass",
    ]


def test_a_vtt_dub_writes_vtt_subtitles_with_voices_and_breaks(tmp_path: Path):
    script = tmp_path / "ep.vtt"
    script.write_text(
        "WEBVTT\n\n00:00:00.500 --> 00:00:02.500\n<v Alice>First line,\nsecond line.\n\n"
        "00:00:03.000 --> 00:00:05.000\n<v Bob>Hello.\n",
        encoding="utf-8",
    )
    sf.write(tmp_path / "a.wav", np.zeros(10, dtype=np.float32), 16000)
    res = run_dub(
        DubOptions(script=script, voices=[str(tmp_path / "a.wav")], lang="eng", output_dir=tmp_path / "o"),
        synthesizer=FakeSynth(),
    )
    out = Path(res.outputs["subtitles"])
    assert out == tmp_path / "o" / "ep.eng.vtt"
    text = out.read_text(encoding="utf-8")
    assert (
        text.startswith("WEBVTT") and "<v Alice>First line,\nsecond line." in text and "<v Bob>Hello." in text
    )
