"""One writer per work folder: `<work_dir>/.lock`, held for the whole run.

The lock is `filelock`'s flock(2) lock on `.lock`: the kernel drops it when the holder exits, however it
exits (kill -9 included), so a dead run never leaves the folder locked. flock says nothing about who holds
it, so the holder also writes `.lock.owner` (pid, host, command, start time) for the message a second run
prints while it waits, or with --no-wait exits 2 with. The owner file is advisory: a stale one (its writer
killed) is simply overwritten by the next holder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from fasttts_cli.errors import FastTTSError, UsageError

LOCK_NAME = ".lock"
OWNER_NAME = ".lock.owner"


@dataclass(frozen=True)
class Owner:
    pid: int | None
    host: str | None
    command: str | None

    def describe(self) -> str:
        if self.pid is None:
            return "another process (pid unknown)"
        where = f" on {self.host}" if self.host and self.host != socket.gethostname() else ""
        return f"pid {self.pid}{where}"


def read_owner(work_dir: Path) -> Owner:
    """Who holds the lock, from the side file; fields are None when it is missing or unreadable (the
    holder may not have written it yet)."""
    try:
        d: Any = json.loads((work_dir / OWNER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Owner(None, None, None)
    if not isinstance(d, dict):
        return Owner(None, None, None)
    pid = d.get("pid")
    return Owner(pid if isinstance(pid, int) else None, d.get("host"), d.get("command"))


def _write_owner(work_dir: Path) -> None:
    from fasttts_cli.dubbing.cache import atomic_write_json

    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": shlex.join(["fasttts", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_json(work_dir / OWNER_NAME, info)


def locked_message(work_dir: Path, owner: Owner) -> str:
    return f"{work_dir} is locked by {owner.describe()} (another fasttts run)"


@contextlib.contextmanager
def hold_work_dir(work_dir: Path, *, wait: bool = True, rep: Any = None, poll: float = 0.1) -> Iterator[None]:
    """Hold `work_dir`'s lock for the body. When another run holds it: wait (saying so once, through
    `rep.warn`, which also emits the progress `warning` event), or with `wait=False` raise UsageError
    (exit 2)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(work_dir / LOCK_NAME))
    try:
        _try(lock, timeout=0)
    except Timeout:
        owner = _owner_of_busy(work_dir)
        if not wait:
            raise UsageError(
                f"{locked_message(work_dir, owner)}; wait for it or use another --work-dir",
                hint="without --no-wait, fasttts waits for the other run to finish",
            ) from None
        if rep is not None:
            rep.warn(f"{locked_message(work_dir, owner)}: waiting for it to finish")
            with rep.stage("wait"):
                _try(lock, timeout=-1, poll_interval=poll)
        else:
            _try(lock, timeout=-1, poll_interval=poll)
    try:
        with contextlib.suppress(OSError, FastTTSError):  # advisory; the lock itself is held
            _write_owner(work_dir)
        yield
    finally:
        with contextlib.suppress(OSError):
            if read_owner(work_dir).pid == os.getpid():
                (work_dir / OWNER_NAME).unlink()
        lock.release()


def _try(lock: FileLock, **kw: Any) -> None:
    """Acquire, with the errors of a folder that cannot hold a lock as one line naming it (exit 2)."""
    try:
        lock.acquire(**kw)
    except Timeout:  # an OSError too (TimeoutError): the caller's "busy" case
        raise
    except NotImplementedError:  # filelock < 4 on a filesystem without flock (some network mounts)
        raise UsageError(
            f"--work-dir: {lock.lock_file}: this filesystem does not support file locks",
            hint="use a work folder on a local disk (--work-dir)",
        ) from None
    except OSError as e:
        raise UsageError(f"--work-dir: cannot lock {lock.lock_file}: {e.strerror or e}") from None


def _owner_of_busy(work_dir: Path, tries: int = 10) -> Owner:
    """The holder's owner record, allowing it a moment to write it right after taking the lock."""
    owner = read_owner(work_dir)
    for _ in range(tries):
        if owner.pid is not None and owner.pid != os.getpid():
            break
        time.sleep(0.05)
        owner = read_owner(work_dir)
    return owner
