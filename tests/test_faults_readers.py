"""Untidy timing lines are read with a warning naming the line (README, Reading policy; issue 29): a
WebVTT timing line with comma milliseconds, an SRT one with a dot or `->`; one warning per kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttts_cli.cli.commands import main


def warnings_of(capsys: pytest.CaptureFixture[str], path: Path) -> list[str]:
    with pytest.raises(SystemExit) as ei:
        main(["inspect", str(path), "--json"])
    assert ei.value.code in (0, None)
    return [w for w in json.loads(capsys.readouterr().out)["warnings"] if "timing line" in w]


def test_webvtt_comma_milliseconds_are_read_with_a_warning_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vtt = tmp_path / "c.vtt"
    cues = "00:00:01.000 --> 00:00:02.000\nOne.\n\n00:00:03,000 --> 00:00:04,000\nTwo.\n\n"
    vtt.write_text(f"WEBVTT\n\n{cues}00:00:05,000 --> 00:00:06,500\nThree.\n", encoding="utf-8")
    (w,) = warnings_of(capsys, vtt)
    assert w.startswith(f"{vtt}:6: untidy timing line '00:00:03,000 --> 00:00:04,000': ','") and "1 more" in w
    tidy = tmp_path / "t.vtt"
    tidy.write_text(f"WEBVTT\n\n{cues.replace(',', '.')}", encoding="utf-8")
    assert warnings_of(capsys, tidy) == []


def test_srt_dot_milliseconds_and_short_arrows_are_each_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srt = tmp_path / "c.srt"
    srt.write_text(
        "1\n00:00:01.000 --> 00:00:02,000\nOne.\n\n2\n00:00:03,000 -> 00:00:04,000\nTwo.\n\n"
        "3\n00:00:05,000 --> 00:00:06,000\nThree.\n",
        encoding="utf-8",
    )
    dot, arrow = warnings_of(capsys, srt)
    assert dot.startswith(f"{srt}:2: ") and "'.' before the milliseconds" in dot
    assert arrow.startswith(f"{srt}:6: ") and "arrow other than '-->'" in arrow
