"""IndexTTS-2.5 parity vector sets from the original (tools/parity25/README.md).

Every `vectors25_*.npz` in $FASTTTS_PARITY25_DIR (default the committed tests/data/parity25) is a case, with
its `.json` sidecar. Its checkpoint is regenerated, not stored: `make_checkpoint25.py` from the vector
folder if it has one there (with the spec `keys25.json` beside it), else the committed tools/parity25, at the
sidecar's seed; the result must carry the sidecar's checkpoint digest, or the vectors are not for it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tests.parity import CACHE, REPO, ParityCase, rel

TOOLS25 = REPO / "tools" / "parity25"
SPEC_FILE = "keys25.json"
GENERATOR = "make_checkpoint25.py"
MANIFEST = "make_checkpoint25.json"


def parity25_dir() -> Path:
    return Path(os.environ.get("FASTTTS_PARITY25_DIR", REPO / "tests" / "data" / "parity25")).resolve()


@dataclass
class Parity25Case(ParityCase):
    """One 2.5 vector set; the sidecar format of tools/parity25 (`checkpoint_seed`, `checks`, `stages`)."""

    @property
    def weight_seed(self) -> int:
        return int(self.sidecar["checkpoint_seed"])

    @property
    def main(self) -> dict[str, Any]:
        return self.sidecar["case"]["main"]

    @property
    def checks(self) -> dict[str, Any]:
        return self.sidecar["checks"]

    def keys_of(self, stage: str) -> list[str]:
        return list(self.sidecar["stages"].get(stage, []))

    def spec_folder(self) -> Path:
        """Where this set's checkpoint spec lives: beside the vectors if it is there, else tools/parity25."""
        return self.folder if (self.folder / SPEC_FILE).is_file() else TOOLS25


def df_tag(df: float) -> str:
    """The oracle's key suffix of a duration factor: 1.0 -> df1p0, 1.37 -> df1p37."""
    return "df" + str(float(df)).replace(".", "p")


def voice_file(case: Parity25Case, ckpt: Path, entry: str) -> Path:
    """A voice the sidecar names ("ref.wav", or "ref.wav (default)" for the emotion audio): the copy in the
    checkpoint, else the one in the spec folder."""
    name = entry.split(" ")[0]
    return ckpt / name if (ckpt / name).is_file() else case.spec_folder() / name


def parity25_keys(npz: Path) -> set[str]:
    """The keys a vector set holds, a delta set's inherited ones included (read at collection: names only)."""
    side = json.loads(npz.with_suffix(".json").read_text(encoding="utf-8"))
    with np.load(npz, allow_pickle=False) as z:
        return set(z.files) | set(side.get("same_as_base", []))


def load_case25(npz: Path) -> Parity25Case:
    side = json.loads(npz.with_suffix(".json").read_text(encoding="utf-8"))
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if side.get("base"):  # a delta set: what it does not change is the base's, bit for bit
        with np.load(npz.parent / side["base"], allow_pickle=False) as z:
            arrays.update({k: z[k] for k in side["same_as_base"] if k not in arrays})
    return Parity25Case(npz.stem, arrays, side, npz.parent)


def checkpoint25_for(case: Parity25Case) -> Path:
    """Regenerate (once, cached under tests/.cache, under a file lock so parallel runs share it) the random
    2.5 checkpoint the case's vectors were made on, and check its digest."""
    spec = case.spec_folder()
    generator = spec / GENERATOR if (spec / GENERATOR).is_file() else TOOLS25 / GENERATOR
    seed = case.weight_seed
    spec_id = hashlib.sha256((spec / SPEC_FILE).read_bytes()).hexdigest()[:12]
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"parity25-ckpt-seed{seed}-{spec_id}"
    with open(CACHE / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # the generator itself does nothing when `out` already holds this seed of this spec
        subprocess.run(
            [sys.executable, str(generator), str(out), "--spec", str(spec), "--seed", str(seed)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    made = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    if made["checkpoint_digest"] != case.sidecar["checkpoint_digest"]:
        raise AssertionError(
            f"{case.name}: the regenerated checkpoint {out} has digest {made['checkpoint_digest'][:16]}, the "
            f"vectors were made on {case.sidecar['checkpoint_digest'][:16]}"
        )
    return out


@cache
def modules25(ckpt: Path) -> Any:
    """Our strict 2.5 loader on the parity checkpoint (eval, fp32), once per checkpoint."""
    import torch

    from fasttts_cli.nets.checkpoint25 import load_checkpoint25

    torch.set_num_threads(1)
    return load_checkpoint25(ckpt)


def tensor(case: Parity25Case, key: str) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(case[key]))


def need(case: Parity25Case, *keys: str) -> None:
    """A vector set may lack a stage (the sidecar's stages_absent); skip what this one does not hold."""
    import pytest

    missing = [k for k in keys if k not in case]
    if missing:
        pytest.skip(f"{case.name} has no {', '.join(missing)}")


def check(case: Parity25Case, key: str, got: Any, tol: float = 1e-4) -> float:
    """got (a tensor or array of the stored shape, or one more/less leading 1) vs case[key], rel < tol."""
    need(case, key)
    want = case[key]
    a = got.detach().cpu().numpy() if hasattr(got, "detach") else np.asarray(got)
    assert a.size == want.size and np.squeeze(a).shape == np.squeeze(want).shape, (key, a.shape, want.shape)
    r = rel(a.reshape(want.shape), want)
    assert r < tol, f"{case.name}: {key} rel {r:.3g} >= {tol}"
    return r
