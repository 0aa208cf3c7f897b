"""The review page without a browser: line statuses, the retake command, the envelope, the HTML's escaping,
and `fasttts review` on a folder that is not a work folder. The page in a real browser:
tests/test_review_browser.py."""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.app.review.data import base_command, line_status, line_warnings, page_line, retake_command
from fasttts_cli.app.review.envelope import HOP_S, peak_bytes, source_envelope
from fasttts_cli.app.review.page import render_html, write_review
from fasttts_cli.cli.commands import main

PLACED = {"start": 1.0, "end": 2.0, "error": None, "action": "fit"}


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({}, "fit"),
        ({"action": "borrowed"}, "fit"),
        ({"render_factor": 1.1658, "action": "sped-up"}, "rendered"),
        ({"render_factor": 0.9, "action": "slowed"}, "rendered"),
        ({"render_factor": 1.25, "stretch_factor": 1.1, "action": "sped-up"}, "sped-up"),
        ({"stretch_factor": 0.9, "action": "slowed"}, "slowed"),
        ({"stretch_factor": 1.2, "shift": 0.4, "action": "shifted"}, "shifted"),
        ({"stretch_factor": 1.25, "overflow": 0.3, "action": "sped-up"}, "overflowing"),
        ({"overflow": 0.3, "truncated": True, "action": "truncated"}, "truncated"),
        ({"start": None, "end": None, "error": "boom", "action": "silence"}, "silence"),
        ({"start": None, "end": None, "error": "boom", "action": "skipped"}, "failed"),
    ],
)
def test_line_status_is_the_strongest_thing_timing_did(fields, status):
    assert line_status({**PLACED, **fields}) == status


def test_retake_command_is_the_dub_command_from_its_folder_without_earlier_takes():
    argv = ["fasttts", "dub", "my script.tsv", "--voice", "A=a b.wav", "--retake", "3", "--take=7=1"]
    argv += ["--take", "2=2", "--json"]
    prefix = base_command(argv, "/work/my dir")
    assert prefix == "cd '/work/my dir' && fasttts dub 'my script.tsv' --voice 'A=a b.wav' --json"
    want = ["fasttts", "dub", "my script.tsv", "--voice", "A=a b.wav", "--json"]
    assert shlex.split(prefix.split(" && ", 1)[1]) == want
    # ranges compressed, no spaces: the syntax of --only / --retake
    assert retake_command(prefix, [9, 2, 3, 4, 7]) == prefix + " --retake 2-4,7,9"
    # after `--` everything is the script, even a name that looks like a flag
    assert base_command(["fasttts", "dub", "--", "--retake"], None) == "fasttts dub -- --retake"


def test_line_warnings_name_the_line():
    ws = ["line 7: cut at the slot's end", "lines 3-5, 9 ran long", "line 70: x", "draft"]
    assert line_warnings(7, ws) == [ws[0]]
    assert line_warnings(4, ws) == [ws[1]]
    assert line_warnings(9, ws) == [ws[1]]
    assert line_warnings(1, ws) == []


def test_page_line_carries_take_and_takes_when_the_report_has_them():
    base = {**PLACED, "index": 3, "text": "hi", "seed": 5}
    assert page_line(base, [], None, None)["takes"] == [1]
    got = page_line({**base, "take": 2, "takes": [1, 2]}, [], "ab12", -20.0)
    assert (got["take"], got["takes"], got["clip"], got["lufs"]) == (2, [1, 2], "ab12", -20.0)


def test_envelope_peaks_one_byte_per_hop_on_a_square_root_scale(tmp_path: Path):
    import soundfile as sf

    x = np.zeros((2, 1000), dtype=np.float32)
    x[1, 150] = -0.25  # the louder channel counts
    x[0, 999] = 1.0
    assert list(peak_bytes(x, 100)) == [0, round(0.5 * 255)] + [0] * 7 + [255]
    sr = 16000
    sound = np.concatenate([np.zeros(sr), 0.5 * np.ones(sr)]).astype(np.float32)
    src = tmp_path / "src.wav"
    sf.write(src, sound, sr)
    env = source_envelope(src, tmp_path / "work")
    assert env.hop == HOP_S and len(env.peaks) == 40
    assert max(env.peaks[:19]) == 0 and min(env.peaks[21:]) >= 178  # sqrt(0.5)*255 = 180, resampler ripple
    stored = json.loads((tmp_path / "work" / "review" / "envelope.json").read_text())
    assert base64.b64decode(stored["peaks"]) == env.peaks
    # kept: a second call does not decode (a changed file would: its size/mtime differ)
    stored["peaks"] = base64.b64encode(b"\x07" * 40).decode()
    (tmp_path / "work" / "review" / "envelope.json").write_text(json.dumps(stored))
    assert source_envelope(src, tmp_path / "work").peaks == b"\x07" * 40


def test_html_data_cannot_close_its_script_element():
    html = render_html({"title": "a <b>", "lines": [{"text": "</script><script>alert(1)"}]})
    assert html.count("</script>") == 2  # the data block's and the script's own
    assert "\\u003c/script>\\u003cscript>alert(1)" in html
    assert "<title>a &lt;b&gt; · fasttts review</title>" in html


def test_a_report_without_audio_still_makes_a_page(tmp_path: Path):
    """No video, no cached lines (a work folder copied without its cache): a page, and a warning."""
    report = {
        "script": "s.tsv",
        "video": None,
        "options": {"loudness": -23.0},
        "summary": {},
        "lines": [{**PLACED, "index": 1, "text": "x", "slot": [1.0, 2.0], "render_key": "ab" * 32}],
    }
    warned: list[str] = []
    page = write_review(tmp_path / "w", report, tmp_path / "s.review.html", warned.append)
    assert page.lines == 1 and page.placed == 1 and not page.envelope
    assert any("no cached audio for lines 1" in w for w in warned)
    assert '"command":null' in page.path.read_text()


@pytest.mark.parametrize("make", ["missing", "empty", "bad-json", "not-a-report"])
def test_review_of_a_folder_that_is_not_a_work_folder_is_exit_2_naming_it(tmp_path, capsys, make):
    folder = tmp_path / "nope.fasttts"
    if make != "missing":
        folder.mkdir()
    if make == "bad-json":
        (folder / "report.json").write_text("{")
    if make == "not-a-report":
        (folder / "report.json").write_text('{"lines": 3}')
    with pytest.raises(SystemExit) as ei:
        main(["review", str(folder), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert ei.value.code == 2 and out["exit_code"] == 2
    assert str(folder) in out["error"] and "not a fasttts work folder" in out["error"]


def test_review_of_a_moved_work_folder_writes_beside_it(tmp_path, capsys):
    work = tmp_path / "film.fasttts"
    work.mkdir()
    report = {
        "video": None,
        "lines": [{**PLACED, "index": 1, "text": "x", "slot": [1.0, 2.0], "render_key": None}],
        "outputs": {"review": "/gone/elsewhere/film.eng.review.html"},
    }
    (work / "report.json").write_text(json.dumps(report))
    with pytest.raises(SystemExit) as ei:
        main(["review", str(work), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert ei.value.code == 0 and out["page"] == str(tmp_path / "film.eng.review.html")
    assert (tmp_path / "film.eng.review.html").is_file() and not Path("/gone").exists()
    with pytest.raises(SystemExit) as ei:
        main(["review", str(work), "-o", str(tmp_path / "page.txt"), "--json"])
    assert ei.value.code == 2 and "-o/--output" in json.loads(capsys.readouterr().out)["error"]
