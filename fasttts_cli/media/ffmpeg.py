"""Locate ffmpeg: the system one on PATH, else the binary shipped by the `imageio-ffmpeg` package."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from fasttts_cli.errors import MissingDependencyError


@functools.cache
def ffmpeg_path() -> str:
    env = os.environ.get("FASTTTS_FFMPEG")
    if env:
        if not Path(env).is_file():
            raise MissingDependencyError(f"$FASTTTS_FFMPEG={env}: no such file")
        return env
    found = shutil.which("ffmpeg")
    if found:
        return found
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        raise MissingDependencyError(
            "ffmpeg not found (neither on PATH nor from the imageio-ffmpeg package)",
            hint="install it: `apt-get install ffmpeg` or `pip install imageio-ffmpeg`",
        ) from None


@functools.cache
def ffmpeg_filters() -> frozenset[str]:
    """Names of the filters this ffmpeg build has (e.g. to know whether `rubberband` is there)."""
    out = subprocess.run(
        [ffmpeg_path(), "-hide_banner", "-filters"], capture_output=True, text=True, check=False
    )
    names = set()
    for line in out.stdout.splitlines():
        # Rows look like " TS aap   AA->A   description": flags, name, in->out, text.
        m = re.match(r"^\s*[T.][S.]\s+(\S+)\s+\S*->\S*\s", line)
        if m:
            names.add(m.group(1))
    return frozenset(names)


def run_ffmpeg(
    args: list[str], *, what: str, on_time: Callable[[float], None] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg quietly; on failure raise with the last lines of its log so the user sees why.
    `on_time(seconds)`: called as ffmpeg reports how much of the output it has written (its `-progress`
    report on stdout, so `args` must not write to stdout then)."""
    cmd = [ffmpeg_path(), "-hide_banner", "-nostdin", "-loglevel", "error", "-y", *args]
    if on_time is None:
        proc = subprocess.run(cmd, capture_output=True, check=False)
    else:
        proc = _run_reporting([*cmd[:-1], "-progress", "pipe:1", "-nostats", cmd[-1]], on_time)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
        from fasttts_cli.errors import FastTTSError

        raise FastTTSError(f"ffmpeg failed while {what}: " + (" | ".join(tail) or f"exit {proc.returncode}"))
    return proc


_OUT_TIME = re.compile(rb"^out_time_(?:us|ms)=(\d+)\s*$")  # both are microseconds (ms is a misnomer)


def _run_reporting(cmd: list[str], on_time: Callable[[float], None]) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg with `-progress pipe:1`, calling on_time as it goes; its log is read alongside, so
    neither pipe can fill up and stall it. Killed if the caller stops (an interrupt in on_time)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err: list[bytes] = []
    reader = threading.Thread(
        target=lambda: err.append(proc.stderr.read() if proc.stderr else b""), daemon=True
    )
    reader.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = _OUT_TIME.match(line)
            if m:
                on_time(int(m.group(1)) / 1e6)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, b"", b"".join(err))
