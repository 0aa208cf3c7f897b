"""What a person sees: tables, status lists, batch progress and --help, run as real `fasttts` processes on a
pseudo-terminal 80 and 120 columns wide (nothing wider than the terminal, no header cut, bars keep their
counts) and into a pipe (plain rows: one row a line, full headers, no box drawing, no escape codes)."""

from __future__ import annotations

import functools
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fasttts_cli.app.batch_progress import fit, summary_line, tally
from fasttts_cli.app.job import AUDIO_EXTS, FAILURE_POLICIES, MIX_MODES, OVERFLOW_POLICIES
from fasttts_cli.cli.shared import FIT_MODES, INPUT_FORMATS
from fasttts_cli.cli.tables import Column, table_lines
from fasttts_cli.dubbing.readers import FORMATS
from fasttts_cli.dubbing.timing import FIT_MODES as TIMING_FIT_MODES

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
VOICE = SAMPLES / "voices" / "alice.wav"
DIALOGUE = str(SAMPLES / "dialogue.srt")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
WIDTHS = (80, 120)
INSPECT_HEADERS = ("#", "start", "end", "speaker", "tokens", "est. s", "render", "stretch", "action", "text")


def _env(columns: int | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FASTTTS_ENGINE", None)  # the draft voice: no engine to load
    env.pop("COLUMNS", None)
    if columns is not None:
        env.update(COLUMNS=str(columns), LINES="60", TERM="xterm-256color")
    return env


def piped(*args: object) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "fasttts_cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120, check=False)


@functools.cache
def read_only(*args: str) -> subprocess.CompletedProcess[str]:
    """`piped` for the commands that only read (help, inspect, presets): run once for the module."""
    return piped(*args)


def on_terminal(columns: int, *args: object, timeout: float = 120.0) -> tuple[int, str]:
    """Run `fasttts ARGS` with stdout and stderr on a pseudo-terminal `columns` wide: (exit code, all it
    wrote, escape codes included)."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    cmd = [sys.executable, "-m", "fasttts_cli", *map(str, args)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=_env(columns))
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def screen_lines(raw: str) -> list[str]:
    """The lines as the terminal shows them once the run is over, for output without live redraws."""
    return [ANSI.sub("", ln).rstrip() for ln in raw.replace("\r\n", "\n").split("\n")]


def assert_fits(lines: list[str], width: int) -> None:
    wide = [ln for ln in lines if len(ln) > width]
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[:3]}"


# ---- tables ----------------------------------------------------------------------------------------


def test_inspect_piped_is_one_plain_row_per_cue_with_full_headers():
    proc = read_only("inspect", DIALOGUE)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[1].split()
    assert " ".join(header) == " ".join(INSPECT_HEADERS), lines[1]
    cues = json.loads(read_only("inspect", DIALOGUE, "--json").stdout)["cues"]
    rows = lines[2 : 2 + len(cues)]
    for row, cue in zip(rows, cues, strict=True):
        assert row.split()[0] == str(cue["index"]), row
        assert row.endswith(" ".join(cue["text"].split())), row  # the whole text, on the row's own line
    assert lines[2 + len(cues)].startswith("speakers: ")
    assert not ANSI.search(proc.stdout) and "┃" not in proc.stdout and "│" not in proc.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_inspect_on_a_terminal_fits_and_keeps_every_header_and_word(width: int):
    code, raw = on_terminal(width, "inspect", SAMPLES / "dialogue.srt")
    assert code == 0, raw
    lines = screen_lines(raw)
    assert_fits(lines, width)  # the table, and the speakers, batches, forecast and warnings after it
    head = lines[1]
    for h in INSPECT_HEADERS[:-1]:
        assert re.search(rf"(^|\s){re.escape(h)}(\s|$)", head), (h, head)
    assert "text" in " ".join(lines[1:3]).split()
    shown = " ".join(" ".join(lines).split())
    cues = json.loads(read_only("inspect", DIALOGUE, "--json").stdout)["cues"]
    for cue in cues:  # wrapped, but every word is there in order
        words = cue["text"].split()
        assert re.search(r"\s+(\S*\s+)*?".join(map(re.escape, words)), shown), cue["text"]


def test_presets_piped_is_one_row_per_preset():
    proc = read_only("presets")
    assert proc.returncode == 0, proc.stderr
    names = [p["name"] for p in json.loads(read_only("presets", "--json").stdout)["presets"]]
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["name", "needs", "here", "description"]
    for name, row in zip(names, lines[2 : 2 + len(names)], strict=True):
        assert row.split()[0] == name, row
    assert not ANSI.search(proc.stdout) and "│" not in proc.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_presets_on_a_terminal_fit_with_whole_headers(width: int):
    code, raw = on_terminal(width, "presets")
    assert code == 0, raw
    lines = screen_lines(raw)
    assert_fits(lines, width)  # the table and the missing pieces after it
    table = lines[: next(i for i, ln in enumerate(lines) if ": missing " in ln or not ln)]
    assert table[1].split() == ["name", "needs", "here", "description"]
    names = [p["name"] for p in json.loads(read_only("presets", "--json").stdout)["presets"]]
    assert [ln.split()[0] for ln in table[3:] if ln[:1].strip()] == names  # each name starts its row


def test_doctor_on_a_terminal_wraps_under_its_check_and_piped_is_a_line_each():
    # doctor probes ffmpeg, the runtimes and the GPU stack (seconds): one terminal width, one pipe
    code, raw = on_terminal(80, "doctor")
    lines = [ln for ln in screen_lines(raw) if ln]
    assert code in (0, 3), raw
    assert_fits(lines, 80)
    assert any(ln.startswith(" " * 10) and not ln.strip().startswith("fix:") for ln in lines)  # wrapped
    proc = piped("doctor")
    assert proc.returncode == code, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("[") and "licences of the models in use:" in out
    checks = out[: out.index("licences of the models in use:")]
    # one line a check (and one a fix): nothing wrapped into a pipe
    assert all(ln.startswith("[") or ln.startswith(" " * 10 + "fix: ") for ln in checks), checks
    assert len([ln for ln in checks if ln.startswith("[")]) == len([ln for ln in lines if ln.startswith("[")])


def test_table_lines_fit_any_width_and_never_cut_a_header():
    cols = [Column("#", right=True), Column("speaker"), Column("confidence", right=True)]
    cols.append(Column("text", wrap=True))
    rows = [(str(i), "NARRATOR" * (i % 3), f"{i / 7:+.3f}", "word " * (5 * i)) for i in range(1, 9)]
    for width in (24, 40, 60, 80, 120, 200):
        lines = table_lines(cols, rows, width)
        assert_fits(lines, width)
        assert {"#", "speaker", "confidence"} <= set(lines[0].split()), (width, lines[0])
        assert "text" in " ".join(lines[:2]).split()
        assert sum(ln.count("word") for ln in lines) == sum(5 * i for i in range(1, 9))
    plain = table_lines(cols, rows, None)
    assert len(plain) == 1 + len(rows) and plain[0].split() == ["#", "speaker", "confidence", "text"]


# ---- batch -----------------------------------------------------------------------------------------

LONG_VOICE = "/nonexistent/" + "a-very-long-folder-name/" * 6 + "voice_reference_of_the_narrator.wav"


def _manifest(tmp_path: Path) -> Path:
    rows = [
        {"id": "ep1", "script": str(SAMPLES / "demo.srt"), "voice": str(VOICE), "dry_run": True},
        {"id": "ep2", "script": str(SAMPLES / "demo.srt"), "voice": LONG_VOICE},
        {"id": "ep3", "script": str(SAMPLES / "dialogue.srt"), "voice": str(VOICE), "dry_run": True},
    ]
    for k, r in enumerate(rows, 1):
        r["output_dir"] = str(tmp_path / f"out{k}")
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return jobs


def _last_frame(raw: str) -> list[str]:
    """The bars as the live display left them: what follows its last line-clear, up to the cursor's
    return (rich redraws the whole display after erasing it each time)."""
    tail = raw[raw.rindex("\x1b[2K") :]
    tail = tail[: tail.index("\x1b[?25h")] if "\x1b[?25h" in tail else tail
    return [ln for ln in screen_lines(tail) if ln]


@pytest.mark.parametrize("width", WIDTHS)
def test_batch_bars_keep_their_counts_when_an_error_is_long(tmp_path: Path, width: int):
    code, raw = on_terminal(width, "batch", _manifest(tmp_path))
    assert code == 1, raw
    frame = _last_frame(raw)
    rows = {ln.split()[0]: ln for ln in frame}
    assert {"all", "ep1", "ep2", "ep3"} <= set(rows), frame
    assert_fits(frame, width)
    for job in ("ep1", "ep2", "ep3"):
        assert "━" in rows[job] and re.search(r"\s1/1\s", rows[job]), rows[job]
    assert "failed: --voice" in rows["ep2"] and rows["ep2"].endswith("…"), rows["ep2"]
    assert rows["ep1"].endswith("done") and rows["ep3"].endswith("done")
    after = screen_lines(raw[raw.rindex("\x1b[2K") :])
    assert LONG_VOICE in "\n".join(after)  # the full error is printed once the bars are done
    assert [ln for ln in after if ln][-1] == "3 jobs: 2 ok, 1 failed"


def test_batch_piped_ends_with_the_summary_and_json_counts(tmp_path: Path):
    jobs = _manifest(tmp_path)
    proc = piped("batch", jobs)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[-1] == "3 jobs: 2 ok, 1 failed"
    assert not ANSI.search(proc.stderr + proc.stdout)
    assert any(ln.startswith("fasttts: job ep2 (2/3): failed: ") for ln in proc.stderr.splitlines())
    r = json.loads(piped("batch", jobs, "--json").stdout)
    assert r["counts"] == {"ok": 2, "failed": 1, "not_run": 0}
    assert r["counts"] == tally(j["status"] for j in r["jobs"])


def test_summary_line_and_fit():
    assert summary_line({"ok": 2, "failed": 1, "not_run": 0}) == "3 jobs: 2 ok, 1 failed"
    assert summary_line({"ok": 1, "failed": 0, "not_run": 0}) == "1 job: 1 ok, 0 failed"
    assert summary_line({"ok": 0, "failed": 1, "not_run": 2}) == "3 jobs: 0 ok, 1 failed, 2 not run"
    assert fit("short", 10) == "short" and fit("a\nb  c", 10) == "a b c"
    assert fit("x" * 20, 10) == "x" * 9 + "…"


# ---- --help ----------------------------------------------------------------------------------------

COMMANDS_WITH_ARGS = {
    "dub": "SCRIPT",
    "inspect": "SCRIPT",
    "synth": "TEXT",
    "batch": "JOBS",
    "cast": "VIDEO SUBTITLES",
    "download": "[DIR]",  # optional with --separation (its own cache folder)
    "tiny-checkpoint": "DIR",
}


def _option_help(text: str, flag: str) -> str:
    """The help entry of `flag`: its line and the indented lines after it."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if re.match(rf"\s+(-\w, )?{re.escape(flag)}\b", ln))
    out = [lines[i]]
    for ln in lines[i + 1 :]:
        if re.match(r"\s+-", ln) or not ln.strip():
            break
        out.append(ln)
    return " ".join(" ".join(out).split())


@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_ARGS))
def test_help_names_arguments_and_shows_no_bare_types(command: str):
    proc = read_only(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"Usage: fasttts {command} [OPTIONS] {COMMANDS_WITH_ARGS[command]}" in proc.stdout
    assert "<str>" not in proc.stdout and "{" not in proc.stdout, proc.stdout


def test_dub_help_lists_the_choices_and_what_lang_takes():
    text = read_only("dub", "--help").stdout
    assert "[model|stretch]" in _option_help(text, "--fit")
    assert "[" + "|".join(MIX_MODES) + "]" in _option_help(text, "--mix")
    assert "[" + "|".join(OVERFLOW_POLICIES) + "]" in _option_help(text, "--overflow")
    assert "[" + "|".join(FAILURE_POLICIES) + "]" in _option_help(text, "--on-line-failure")
    assert "[" + "|".join(FORMATS) + "]" in _option_help(text, "--format")
    lang = _option_help(text, "--lang")
    assert "639-1" in lang and "639-2" in lang and "es-ES" in lang, lang
    assert FIT_MODES == TIMING_FIT_MODES and INPUT_FORMATS == FORMATS  # the help's copies of the lists


def test_synth_help_lists_every_format_it_writes():
    out = _option_help(read_only("synth", "--help").stdout, "--output")
    assert all(ext in out for ext in AUDIO_EXTS), out
