"""Files being written: unique temporary names, the sweep of those a killed run left, write errors.

Every file fasttts writes goes first to `.<stem>.<pid>-<random>.partial<ext>` in the final file's folder and
is renamed over the final name only when complete. The pid and the random part make the name unique per
run and per file, so two runs never write the same temporary file; the real extension comes last so ffmpeg
and libsndfile pick the right format from it. The pid also tells a later run whether the writer is still
alive: `sweep_partials` removes only partials whose writer is gone.

A write that fails at run time (disk full, quota, a folder made read-only) is a `WriteError`: exit 1, the
message naming the file that could not be written (never the file being read) and the system's reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from collections.abc import Collection
from pathlib import Path

from fasttts_cli.errors import FastTTSError

# A partial name as `partial_path` makes it (DiskArray's prefix form `.<prefix>-<pid>-<random>` too).
_PARTIAL_RE = re.compile(
    r"^\.(?P<stem>.+)[.-](?P<pid>\d+)-(?P<token>[0-9a-f]{8})\.partial(?P<ext>(\.[^.]+)*)$"
)

# Errors that mean "the disk said no", as opposed to a bug or a bad path.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})
_DISK_FULL_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
# Below this much free space a write error without an errno (libsndfile, numpy) is reported as disk full.
_NEARLY_FULL = 8 << 20


def _umask() -> int:
    """The process umask. Read from /proc where possible: setting it to read it back is a (brief) race with
    other threads creating files."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode open() gives a new file (0o666 less the umask: 0o644 typically)."""
    return 0o666 & ~_umask()


def partial_path(final: Path, *, ext: str | None = None) -> Path:
    """A fresh temporary name for `final` in its folder: `.<stem>.<pid>-<random>.partial<ext>`
    (`ext` defaults to final's own extension)."""
    final = Path(final)
    ext = final.suffix if ext is None else ext
    return final.with_name(f".{final.stem}.{os.getpid()}-{secrets.token_hex(4)}.partial{ext}")


def create_partial(final: Path, *, ext: str | None = None, prefix: str | None = None) -> tuple[int, Path]:
    """Create (O_EXCL) and open a new partial file for `final`; returns (fd, path). With `prefix`, the name
    is `<prefix><pid>-<random>.partial<ext>` in final's folder instead (scratch files without a final
    name). The file gets the mode a plain open() would give it."""
    final = Path(final)
    for _ in range(100):
        if prefix is not None:
            token = f"{os.getpid()}-{secrets.token_hex(4)}"
            path = final.parent / f"{prefix}{token}.partial{final.suffix if ext is None else ext}"
        else:
            path = partial_path(final, ext=ext)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, default_file_mode())
        except FileExistsError:
            continue  # 32 random bits collided: draw again
        return fd, path
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(final))


def parse_partial(name: str) -> tuple[str, int] | None:
    """(stem, writer pid) of a partial file name, None for any other name."""
    m = _PARTIAL_RE.match(name)
    return (m["stem"], int(m["pid"])) if m else None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_partials(folder: Path, *, stems: Collection[str] | None = None) -> list[Path]:
    """Remove the partial files a killed or crashed run left directly in `folder`; returns them.

    Only names `partial_path`/`create_partial` make are touched, and only when their writer is gone (its
    pid is not running) or is this process (a pid reused after a restart: this run has written nothing
    there yet). `stems`: only partials of these final names, in folders other runs may write to as well."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    me = os.getpid()
    for entry in entries:
        parsed = parse_partial(entry.name)
        if parsed is None or (stems is not None and parsed[0] not in stems):
            continue
        pid = parsed[1]
        if pid != me and pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def existing_partials(final: Path) -> list[Path]:
    """The partial files of `final` now in its folder (whoever wrote them)."""
    final = Path(final)
    try:
        names = os.listdir(final.parent)
    except OSError:
        return []
    out = []
    for name in names:
        parsed = parse_partial(name)
        if parsed is not None and parsed[0] == final.stem:
            out.append(final.parent / name)
    return sorted(out)


# ---- write errors --------------------------------------------------------------------------------


class WriteError(FastTTSError):
    """A file could not be written at run time (exit 1); `path` is the file, `errno` the reason if known."""

    def __init__(self, path: object, reason: str, *, err: int | None = None, hint: str | None = None):
        super().__init__(f"cannot write {path}: {reason}", hint=hint)
        self.path = path
        self.errno = err


def _nearly_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _NEARLY_FULL


def disk_full_text(message: str) -> str | None:
    """The "No space left on device" (or quota) phrase in a tool's message, if there is one."""
    return next((t for t in _DISK_FULL_TEXTS if t in message), None)


def write_failed(path: Path, exc: BaseException, *, hint: str | None = None) -> WriteError:
    """The WriteError for `exc` raised while writing `path`.

    Some writers (libsndfile, numpy's tofile) lose the errno; when the folder is then (nearly) full the
    reason given is the disk being full, which is what such a failure is in practice."""
    path = Path(path)
    if isinstance(exc, WriteError):
        return exc
    err = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    if err is not None:
        reason = os.strerror(err) if err in DISK_ERRNOS else (getattr(exc, "strerror", None) or str(exc))
    elif _nearly_full(path.parent):
        err, reason = errno.ENOSPC, os.strerror(errno.ENOSPC)
    else:
        reason = getattr(exc, "error_string", None) or str(exc) or type(exc).__name__
    return WriteError(path, reason, err=err, hint=hint)


def os_error_message(e: OSError) -> str:
    """One line for an OSError that reached the CLI: the path that failed and why.

    A copy or rename that runs out of space names the destination (filename2): Python puts the source in
    `filename` for those, and the source is not what could not be written."""
    reason = e.strerror or str(e)
    if e.filename2 is not None:
        if e.errno in DISK_ERRNOS:
            return f"cannot write {e.filename2}: {reason}"
        return f"{e.filename} -> {e.filename2}: {reason}"
    if e.filename is not None:
        return f"{e.filename}: {reason}"
    return reason


def sweep_run_leftovers(work_dir: Path, outputs: Collection[Path]) -> list[Path]:
    """What a killed run left behind: the partials in the work dir and its cache folders (the caller holds
    the work dir's lock), and those of `outputs` (by name only) in their folders, which other jobs may
    share."""
    removed = sweep_partials(work_dir)
    lines = work_dir / "lines"
    with contextlib.suppress(OSError):
        for sub in sorted(lines.iterdir()) if lines.is_dir() else []:
            if sub.is_dir():
                removed += sweep_partials(sub)
    for out in outputs:
        removed += sweep_partials(Path(out).parent, stems={Path(out).stem})
    return removed
