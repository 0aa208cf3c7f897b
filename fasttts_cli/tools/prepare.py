"""Gather, where PyPI works, what a GPU acceptance run needs on a machine that has no network.

    python3 -m fasttts_cli.tools.prepare [--out DIR] [--parity-out DIR] [--packages a,b] [--limit-mib 64]
    python3 -m fasttts_cli.tools.accept_torch --prepare [same options]

The lent GPU machine has Python 3.12, torch and CUDA but no network, and each call carries at most 64 MiB
of the working tree. This writes two git-ignored folders into the source tree: `.whl/` (cp312 manylinux
wheels of the small packages the acceptance path imports, none of them torch). The parity vectors are the
repository's own (tests/data/parity, with the checkpoint spec and make_checkpoint.py in tools/parity2: the
0.9 GB checkpoint is regenerated on the machine), so they travel with the tree; only a parity folder from
elsewhere (`--parity-src` or $FASTTTS_PARITY_DIR) is copied, complete, into `tests/.cache/parity-src/`.
It prints the `carry` list and the total that would travel (tracked and untracked-not-ignored files + the
carried folders), and fails when that is over the limit.

On the GPU machine the acceptance program calls `ensure_installed`: a module that imports is left alone
(the machine's own packages win); only the missing ones are installed from `.whl/` with
`pip install --no-index --find-links`, into a folder appended to the path.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / ".whl"
PARITY_COPY = REPO / "tests" / ".cache" / "parity-src"
PARITY_VECTORS = REPO / "tests" / "data" / "parity"  # made by tools/parity2/run_original.py
PARITY_SPEC = REPO / "tools" / "parity2"  # keys.json, make_checkpoint.py, the voices
LIMIT_MIB = 64  # what one device call carries
# import name -> PyPI name: what the torch acceptance path imports beyond torch (the parity checkpoint's
# maker needs numpy, safetensors and PyYAML; the CUDA unit tests need pytest and its own dependencies;
# the audio front end and loudness need soxr, soundfile (cffi, pycparser) and pyloudnorm). unidic-lite
# (47 MB, Japanese text) is left out: the 2.5 language check reports ja as skipped without it.
TORCH_PACKAGES: dict[str, str] = {
    "numpy": "numpy",
    "yaml": "pyyaml",
    "safetensors": "safetensors",
    "soxr": "soxr",
    "soundfile": "soundfile",
    "cffi": "cffi",
    "pycparser": "pycparser",
    "pyloudnorm": "pyloudnorm",
    "pytest": "pytest",
    "pluggy": "pluggy",
    "iniconfig": "iniconfig",
    "packaging": "packaging",
    "pygments": "pygments",
    # the separation section (`--separate`: demucs and its pure-Python dependencies, ~0.2 MB of wheels)
    "demucs": "demucs",
    "einops": "einops",
    "julius": "julius",
    "tqdm": "tqdm",
}
PARITY_FILES = ("README.md", "keys.json", "buffers.npz", "config.yaml", "bpe.model", "make_checkpoint.py")
PARITY_GLOBS = ("vectors_*.npz", "vectors_*.json")
PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
)


def default_parity_source() -> Path:
    env = os.environ.get("FASTTTS_PARITY_DIR")
    return Path(env) if env else PARITY_VECTORS


def parity_spec(folder: Path) -> Path:
    """Where the checkpoint spec of the vectors in `folder` lives: beside them, else tools/parity2."""
    return folder if (folder / "keys.json").is_file() else PARITY_SPEC


def download_wheels(dest: Path, packages: Sequence[str], python: str = "3.12") -> None:
    """cp312 manylinux x86-64 wheels, no dependencies resolved (each needed one is named)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps"]
    cmd += ["--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    r = subprocess.run([*cmd, *packages], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"pip download {' '.join(packages)} failed: {' / '.join(tail)}")


def copy_parity(src: Path, dest: Path) -> list[Path]:
    """The vectors of `src` with their spec (beside them, else tools/parity2): one complete folder."""
    spec = parity_spec(src)
    missing = [n for n in PARITY_FILES if not (spec / n).is_file()]
    if missing or not list(src.glob("vectors_*.npz")):
        raise FileNotFoundError(
            f"{src}: not a parity folder (missing {', '.join(missing) or 'vectors_*.npz'})"
        )
    dest.mkdir(parents=True, exist_ok=True)
    files = [spec / n for n in PARITY_FILES] + sorted(spec.glob("*.wav"))
    files += sorted(p for g in PARITY_GLOBS for p in src.glob(g))
    for f in files:
        shutil.copyfile(f, dest / f.name)
    return files


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def tree_bytes(repo: Path | None = None) -> int:
    """What a device call sends besides `carry`: tracked files and untracked ones git does not ignore."""
    repo = repo or REPO
    r = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    names = {n for n in r.stdout.decode().split("\0") if n}
    return sum((repo / n).stat().st_size for n in names if (repo / n).is_file())


def carry_paths(folders: Sequence[Path], repo: Path | None = None) -> list[str]:
    repo = repo or REPO
    out = []
    for f in folders:
        try:
            out.append(str(f.resolve().relative_to(repo.resolve())))
        except ValueError:
            raise ValueError(
                f"{f}: outside the source tree {repo}, so a device call cannot carry it"
            ) from None
    return out


def deps_target() -> Path:
    return Path(tempfile.gettempdir()) / f"fasttts-accept-deps-{sys.version_info[0]}{sys.version_info[1]}"


def ensure_installed(packages: Mapping[str, str], wheels: Path = WHEELS) -> list[str]:
    """Install from `wheels`, offline, the packages whose module does not import here; returns them.

    The target folder is appended to sys.path and to PYTHONPATH (child processes: the checkpoint maker,
    pytest), so a package the machine has always wins over a carried one."""
    missing = {mod: pkg for mod, pkg in packages.items() if importlib.util.find_spec(mod) is None}
    if not missing:
        return []
    if not wheels.is_dir():
        names = ", ".join(sorted(missing.values()))
        raise ModuleNotFoundError(
            f"python packages {names} are missing and no {wheels} was carried: run "
            "`python3 -m fasttts_cli.tools.prepare` where PyPI works and carry .whl"
        )
    target = deps_target()
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
    cmd += ["--find-links", str(wheels), "--target", str(target), "--upgrade", *sorted(set(missing.values()))]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"offline install from {wheels} failed: {r.stderr.strip()[-400:]}")
    if str(target) not in sys.path:
        sys.path.append(str(target))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = f"{old}{os.pathsep}{target}" if old else str(target)
    importlib.invalidate_caches()
    return sorted(set(missing.values()))


def main(argv: Sequence[str] | None = None, packages: Mapping[str, str] = TORCH_PACKAGES) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m fasttts_cli.tools.prepare", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, default=WHEELS, help=f"wheel folder (default {WHEELS})")
    ap.add_argument(
        "--parity-src",
        type=Path,
        default=None,
        help="a parity folder to carry (default $FASTTTS_PARITY_DIR; none: the repository's own travel)",
    )
    ap.add_argument("--parity-out", type=Path, default=PARITY_COPY)
    ap.add_argument("--packages", default="", help="more PyPI names to fetch, comma-separated")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    a = ap.parse_args(argv)
    names = sorted({*packages.values(), *(p.strip() for p in a.packages.split(",") if p.strip())})
    src = a.parity_src or (
        Path(os.environ["FASTTTS_PARITY_DIR"]) if os.environ.get("FASTTTS_PARITY_DIR") else None
    )
    try:
        download_wheels(a.out, names)
        if src is not None:
            copy_parity(src, a.parity_out)
        carry = carry_paths([a.out, a.parity_out] if src is not None else [a.out])
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        print(f"prepare: {e}", file=sys.stderr)
        return 1
    sizes = {"tree": tree_bytes(), a.out.name: folder_bytes(a.out)}
    if src is not None:
        sizes["parity copy"] = folder_bytes(a.parity_out)
    total = sum(sizes.values())
    for k, v in sizes.items():
        print(f"{k:>12}: {v / 2**20:7.2f} MiB")
    print(f"{'total':>12}: {total / 2**20:7.2f} MiB (limit {a.limit_mib:g} MiB)")
    print("carry: " + " ".join(carry))
    if total > a.limit_mib * 2**20:
        print(
            f"prepare: {total / 2**20:.1f} MiB is over the {a.limit_mib:g} MiB a device call carries",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
