"""I/O errors name the path and the operation: a full disk at each place a run writes (the cache, the work
dir's assembly, the output, ffmpeg's mux) is exit 1 naming the file that could not be written, with no
traceback, no partial file left and the cache intact; a read-only output folder is exit 2 naming the flag.

A full disk is a real one: a small tmpfs mounted for the test (root only; skipped with the reason
otherwise). No LD_PRELOAD or mocked write calls: the errors come from the kernel, through the real writers.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import soundfile as sf

from fasttts_cli.app import pipeline
from fasttts_cli.cli.commands import main
from fasttts_cli.dubbing.cache import LineCache
from fasttts_cli.media.ffmpeg import run_ffmpeg
from fasttts_cli.partials import os_error_message, parse_partial
from tests.test_pipeline import FakeSynth, write_job_folder


def _try_mount(target: Path, opts: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs (a real full disk)"
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], capture_output=True, text=True
    )
    return None if proc.returncode == 0 else f"cannot mount a tmpfs here: {proc.stderr.strip()}"


@pytest.fixture()
def small_fs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """mount(name, size="64k", ro=False) -> a fresh tmpfs of that size under tmp_path."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "64k", *, ro: bool = False) -> Path:
        target = tmp_path / name
        target.mkdir()
        why = _try_mount(target, f"size={size}" + (",ro" if ro else ""))
        if why:
            pytest.skip(why)
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)


def remount(target: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(target)], check=True)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return write_job_folder(tmp_path)


def dub(capsys, monkeypatch, folder: Path, *extra: object) -> tuple[int, str, str, FakeSynth]:
    """`fasttts dub` through the real CLI with the fake engine; (exit code, stdout, stderr, engine)."""
    fake = FakeSynth()
    monkeypatch.setattr(pipeline, "load_synthesizer", lambda *a, **k: fake)
    args = ["dub", str(folder / "ep.tsv"), "--lang", "eng"]
    args += [f"--voice=A={folder / 'a.wav'}", f"--voice=B={folder / 'b.wav'}", *map(str, extra)]
    with pytest.raises(SystemExit) as ei:
        main(args)
    out, err = capsys.readouterr()
    return int(ei.value.code or 0), out, err, fake


def error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("fasttts: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def cache_state(work: Path, layer: str = "plans") -> dict[str, str]:
    """Each entry's status in one cache layer (plans/: what synthesis made; lines/: the renders)."""
    cache = LineCache(work / layer)
    keys = cache.keys()  # a list, not a dict's view
    return {k: cache.verify(k).status for k in keys}


def partials_in(*folders: Path) -> list[Path]:
    return [p for f in folders if f.is_dir() for p in f.rglob(".*") if parse_partial(p.name)]


def test_full_output_disk_names_the_output_and_keeps_the_cache(capsys, monkeypatch, folder, small_fs):
    out = small_fs("out", "64k")  # the subtitles fit, the 1 MB programme does not
    work = folder / "work"
    code, _, err, _ = dub(capsys, monkeypatch, folder, "--output-dir", out, "--work-dir", work)
    assert code == 1
    assert error_line(err) == f"fasttts: error: cannot write {out / 'ep.eng.wav'}: No space left on device"
    assert not (out / "ep.eng.wav").exists() and partials_in(out, work) == []
    assert sorted(cache_state(work).values()) == ["ok", "ok", "ok"]
    assert (work / "dub.wav").is_file()  # the finished mix stays in the work dir
    remount(out, "8m")  # space freed: the same command finishes from the cache
    code, _, err, fake = dub(capsys, monkeypatch, folder, "--output-dir", out, "--work-dir", work)
    assert code == 0, err
    assert fake.calls == [] and sf.info(str(out / "ep.eng.wav")).frames > 48000


def test_cache_write_on_a_full_disk_keeps_the_finished_lines(capsys, monkeypatch, folder, small_fs):
    work = small_fs("work", "160k")  # the first line fits, the next one does not
    out = folder / "out"
    code, _, err, fake = dub(
        capsys, monkeypatch, folder, "--output-dir", out, "--work-dir", work, "--batch-size", "1"
    )
    assert code == 1
    line = error_line(err)
    assert line.startswith(f"fasttts: error: cannot write {work / 'plans'}/")
    assert line.endswith(": No space left on device") and str(folder / "ep.tsv") not in line, err
    assert "the lines finished so far stay cached in" in err
    states = cache_state(work)
    assert list(states.values()) == ["ok"]  # the finished line, whole; nothing half-written
    assert partials_in(work, out) == []
    remount(work, "8m")
    code, _, err, fake = dub(capsys, monkeypatch, folder, "--output-dir", out, "--work-dir", work)
    assert code == 0, err
    assert sum(len(c) for c in fake.calls) == 2 and "damaged" not in err


def test_full_work_dir_at_assembly_names_the_work_dir_file(capsys, monkeypatch, folder, small_fs):
    work = small_fs("work", "8m")
    out = folder / "out"
    code, _, err, _ = dub(capsys, monkeypatch, folder, "--output-dir", out, "--work-dir", work, "--dry-run")
    assert code == 0, err
    # Synthesize into the cache, then shrink the disk to what is used: the assembly has no room left.
    code, _, err, _ = dub(capsys, monkeypatch, folder, "--output-dir", out / "first", "--work-dir", work)
    assert code == 0, err
    (work / "dub.wav").unlink()
    used = 4096 * (1 + sum(-(-p.stat().st_size // 4096) for p in work.rglob("*") if p.is_file()))
    remount(work, str(used + 8192))
    code, _, err, _ = dub(capsys, monkeypatch, folder, "--output-dir", out, "--work-dir", work)
    assert code == 1
    line = error_line(err)
    assert line.startswith(f"fasttts: error: cannot write {work}/") and "No space left on device" in line
    assert partials_in(work, out) == [] and not (out / "ep.eng.wav").exists()
    assert sorted(cache_state(work).values()) == ["ok", "ok", "ok"]


def test_ffmpeg_mux_on_a_full_disk_names_the_output(capsys, monkeypatch, folder, small_fs):
    video = folder / "ep.mp4"
    src = ["-f", "lavfi", "-i", "testsrc2=d=8:s=160x120:r=25"]
    run_ffmpeg([*src, "-c:v", "libx264", "-pix_fmt", "yuv420p", str(video)], what="test video")
    out = small_fs("out", "16k")
    work = folder / "work"
    code, _, err, _ = dub(
        capsys, monkeypatch, folder, "--video", video, "--output-dir", out, "--work-dir", work
    )
    assert code == 1
    assert error_line(err) == f"fasttts: error: cannot write {out / 'ep.eng.mp4'}: No space left on device"
    assert not (out / "ep.eng.mp4").exists() and partials_in(out) == []
    assert sorted(cache_state(work).values()) == ["ok", "ok", "ok"]


@pytest.mark.parametrize("flag", ["--output-dir", "-o", "--work-dir"])
def test_read_only_output_folder_is_exit_2_naming_the_flag(capsys, monkeypatch, folder, small_fs, flag):
    ro = small_fs("ro", "64k", ro=True)
    target = ro / "x.wav" if flag == "-o" else ro
    extra = [flag, target] if flag != "--work-dir" else [flag, ro, "--output-dir", folder / "out"]
    code, out, err, fake = dub(capsys, monkeypatch, folder, *extra, "--json")
    assert code == 2
    line = error_line(err)
    assert ("-o/--output" if flag == "-o" else flag) in line and str(ro) in line
    assert "Read-only file system" in line
    assert fake.calls == [] and json.loads(out)["exit_code"] == 2


def test_os_error_message_names_the_destination_of_a_failed_copy():
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/w/dub.wav", None, "/out/.ep.1-0.partial.wav")
    assert os_error_message(e) == "cannot write /out/.ep.1-0.partial.wav: No space left on device"
    e = OSError(errno.EACCES, os.strerror(errno.EACCES), "/x/report.json")
    assert os_error_message(e) == "/x/report.json: Permission denied"
