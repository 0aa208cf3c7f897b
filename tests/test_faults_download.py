"""`fasttts download` with no network (issue 29): one clear error naming the file, at once (not after
huggingface_hub's ~25 s of retries), none of its raw retry lines on stderr, and no empty folder left behind
(only what this run made is removed). The real huggingface_hub in a fresh process, its endpoint a port
nothing listens on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("huggingface_hub", reason="the `download` extra is not installed")


def _download(dest: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    with socket.socket() as s:  # a port nothing listens on: the Hub does not answer
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy")}
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(tmp_path / "hub"), PYTHONPATH=str(ROOT)
    )
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "fasttts_cli", "download", str(dest), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    return p, time.monotonic() - t0


def test_no_network_fails_fast_and_clean_leaving_no_folder(tmp_path: Path) -> None:
    dest = tmp_path / "new" / "IndexTTS-2"
    p, seconds = _download(dest, tmp_path)
    r = json.loads(p.stdout)
    assert p.returncode == 1 and r["exit_code"] == 1, p.stderr
    assert r["error"].startswith("could not download config.yaml from IndexTeam/IndexTTS-2: no network")
    assert "Retry" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert seconds < 20, f"{seconds:.1f} s: the retries were waited out"
    assert not (tmp_path / "new").exists()  # both folders were this run's


def test_a_folder_that_was_there_is_kept(tmp_path: Path) -> None:
    dest = tmp_path / "mine"
    dest.mkdir()
    p, _ = _download(dest, tmp_path)
    assert p.returncode == 1 and dest.is_dir(), p.stderr
