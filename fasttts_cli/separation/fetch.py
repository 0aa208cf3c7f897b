"""`fasttts download --separation [DIR]`: the published htdemucs weights in the layout demucs reads.

One file, `955717e8-8726e21a.th` (~80 MB), from Demucs' own download root (what `demucs.pretrained`'s
remote repo fetches; `$FASTTTS_SEPARATION_URL` names a mirror, a file:// folder included), and the bag
definition `htdemucs.yaml` beside it. The weights go to a temporary name, resume from where an interrupted
download stopped (an HTTP Range request), are checked against the sha256 prefix in their name (demucs checks
it again on every load), and only then are renamed; a second run finds them and asks the network nothing.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttts_cli.dubbing.cache import atomic_write_text
from fasttts_cli.errors import FastTTSError, MissingDependencyError
from fasttts_cli.separation.model import CHECKSUM, NAME, SIGNATURE, URL_ENV, URL_ROOT, WEIGHTS, locate

_CHUNK = 1 << 20


@dataclass
class FetchResult:
    folder: Path
    action: str  # fetched | resumed | present
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "command": "download",
            "separation": str(self.folder),
            "files": [{"file": WEIGHTS, "action": self.action, "bytes": self.bytes}],
            "fetched": int(self.action != "present"),
            "present": int(self.action == "present"),
            "bytes": self.bytes,
        }


def _sha256_prefix(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()[: len(CHECKSUM)]


def fetch_separation(folder: Path, *, progress: Callable[[str], None] | None = None) -> FetchResult:
    """Fill `folder` with htdemucs (see the module doc)."""
    say = progress or (lambda _m: None)
    folder = Path(folder).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FastTTSError(f"--separation: cannot make {folder}: {e.strerror or e}") from None
    final = folder / WEIGHTS
    yaml_text = f"models: ['{SIGNATURE}']\n"
    if final.is_file() and _sha256_prefix(final) == CHECKSUM:
        if not (folder / f"{NAME}.yaml").is_file():
            atomic_write_text(folder / f"{NAME}.yaml", yaml_text)
        return FetchResult(folder, "present", final.stat().st_size)
    url = os.environ.get(URL_ENV, URL_ROOT).rstrip("/") + "/" + WEIGHTS
    part = folder / f".{WEIGHTS}.download"  # one name across runs, so a second run resumes it
    have = part.stat().st_size if part.is_file() else 0
    req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    say(f"fetching {url} -> {final}" + (f" (resuming at {have} bytes)" if have else ""))
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status = getattr(resp, "status", None)
            if have and status != 206:  # the server ignored the range: start over
                have = 0
            with open(part, "ab" if have else "wb") as out:
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", None) or e
        raise MissingDependencyError(
            f"--separation: cannot fetch {url}: {reason}",
            hint=f"run the same command again when online (it resumes), or set ${URL_ENV} to a mirror",
        ) from None
    got = _sha256_prefix(part)
    if got != CHECKSUM:
        part.unlink()
        raise MissingDependencyError(
            f"--separation: {url} gave a file whose sha256 starts {got}, not {CHECKSUM}: discarded",
            hint="run the same command again; if it repeats, the mirror serves another file",
        )
    os.replace(part, final)
    atomic_write_text(folder / f"{NAME}.yaml", yaml_text)
    locate(folder)  # the layout the dub will read
    return FetchResult(folder, "resumed" if have else "fetched", final.stat().st_size)
