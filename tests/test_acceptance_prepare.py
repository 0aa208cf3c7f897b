"""tools/prepare.py: the offline wheel step of the GPU acceptance (defect 4: nothing could be installed on
the GPU machine) and the 64 MiB a device call carries."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fasttts_cli.tools import prepare


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel of one module `name` (pip installs it with --no-index)."""
    files = {
        f"{name}.py": b"VALUE = 42\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{name}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return out


def test_ensure_installed_installs_only_what_is_missing_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "fasttts_probe_pkg"
    wheels = tmp_path / "whl"
    _wheel(wheels, name)
    monkeypatch.setattr(prepare, "deps_target", lambda: tmp_path / "site")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert prepare.ensure_installed({"json": "json"}, wheels) == []  # importable: left alone
    assert prepare.ensure_installed({name: name, "json": "json"}, wheels) == [name]
    assert (tmp_path / "site" / f"{name}.py").is_file() and str(tmp_path / "site") == sys.path[-1]
    # child processes (the checkpoint maker, pytest) see it through PYTHONPATH
    import os

    r = subprocess.run(
        [sys.executable, "-c", f"import {name}; print({name}.VALUE)"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "42", r.stderr


def test_ensure_installed_without_wheels_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match=r"fasttts_cli\.tools\.prepare"):
        prepare.ensure_installed({"fasttts_not_a_module": "fasttts-not-a-package"}, tmp_path / "none")


def test_prepare_prints_carry_and_fails_over_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    got: list[tuple[Path, list[str]]] = []

    def fake_download(dest: Path, packages: list[str], python: str = "3.12") -> None:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "numpy-2.0-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"\0" * 2**20)
        got.append((dest, packages))

    from tests.parity import parity_dir

    monkeypatch.setattr(prepare, "download_wheels", fake_download)
    monkeypatch.setattr(prepare, "REPO", tmp_path)
    monkeypatch.setattr(prepare, "tree_bytes", lambda repo=None: 3 * 2**20)
    monkeypatch.delenv("FASTTTS_PARITY_DIR", raising=False)
    copy = tmp_path / "tests/.cache/parity-src"
    argv = ["--out", str(tmp_path / ".whl"), "--parity-out", str(copy)]
    # the repository's own vectors (tests/data/parity + tools/parity2) travel with the tree: nothing copied
    assert prepare.main(argv) == 0
    out = capsys.readouterr().out
    assert "carry: .whl\n" in out and "parity copy" not in out and not copy.exists()
    wanted = {
        "numpy",
        "pyyaml",
        "safetensors",
        "pytest",
        "soxr",
        "soundfile",
        "cffi",
        "pycparser",
        "pyloudnorm",
    }
    assert wanted <= set(got[0][1])
    # a vector folder named from outside is copied, complete with its spec (tools/parity2 when it has none)
    assert not (parity_dir() / "keys.json").is_file()
    argv += ["--parity-src", str(parity_dir())]
    assert prepare.main(argv) == 0
    assert "carry: .whl tests/.cache/parity-src" in capsys.readouterr().out
    for name in ("make_checkpoint.py", "keys.json", "buffers.npz", "bpe.model", "ref.wav", "emo.wav"):
        assert (copy / name).is_file(), name
    assert {p.name for p in copy.glob("vectors_*")} == {p.name for p in parity_dir().glob("vectors_*")}
    assert prepare.main([*argv, "--limit-mib", "4"]) == 1
    assert "over the 4 MiB" in capsys.readouterr().err


def test_tree_bytes_counts_tracked_and_untracked_files(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "a.txt").write_bytes(b"x" * 100)
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big").write_bytes(b"x" * 10_000)
    assert prepare.tree_bytes(tmp_path) == 100 + len("ignored/\n")
