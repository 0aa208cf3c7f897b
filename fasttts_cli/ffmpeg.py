"""Locate ffmpeg: the system one on PATH, else the binary shipped by the `imageio-ffmpeg` package."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
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


def run_ffmpeg(args: list[str], *, what: str) -> subprocess.CompletedProcess[bytes]:
    """Run ffmpeg quietly; on failure raise with the last lines of its log so the user sees why."""
    cmd = [ffmpeg_path(), "-hide_banner", "-nostdin", "-loglevel", "error", "-y", *args]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
        from fasttts_cli.errors import FastTTSError

        raise FastTTSError(f"ffmpeg failed while {what}: " + (" | ".join(tail) or f"exit {proc.returncode}"))
    return proc
