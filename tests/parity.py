"""Parity vector sets from the original IndexTTS-2 (see tools/parity2/README.md).

Every `vectors_*.npz` in $FASTTTS_PARITY_DIR (default the committed tests/data/parity, made by
tools/parity2/run_original.py) is a case; delta files (`base` / `same_as_base` in the sidecar) are resolved
against their base, so a new set in the same format runs with no code change. The checkpoint spec
(keys.json, make_checkpoint.py, the voices) is taken from the vector folder when it holds one (a complete
parity folder), else from the committed tools/parity2.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "tests" / ".cache"
SPEC2 = REPO / "tools" / "parity2"


def parity_dir() -> Path:
    return Path(os.environ.get("FASTTTS_PARITY_DIR", REPO / "tests" / "data" / "parity")).resolve()


def spec_folder(folder: Path) -> Path:
    """Where the checkpoint spec of the vectors in `folder` lives: beside them, else tools/parity2."""
    return folder if (folder / "keys.json").is_file() else SPEC2


@dataclass
class ParityCase:
    name: str
    arrays: dict[str, np.ndarray]
    sidecar: dict[str, Any]
    folder: Path

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def __contains__(self, key: str) -> bool:
        return key in self.arrays

    @property
    def case(self) -> dict[str, Any]:
        return self.sidecar["case"]

    @property
    def weight_seed(self) -> int:
        return int(self.sidecar["checkpoint"]["weight_seed"])

    @property
    def spec(self) -> Path:
        """The folder of this set's checkpoint spec: config.yaml, bpe.model, the voices the sidecar names."""
        return spec_folder(self.folder)


def load_cases(folder: Path | None = None) -> list[ParityCase]:
    folder = folder or parity_dir()
    cases = []
    for npz in sorted(folder.glob("vectors_*.npz")):
        side = json.loads(npz.with_suffix(".json").read_text(encoding="utf-8"))
        arrays = dict(np.load(npz, allow_pickle=False))
        base_name = side.get("base")
        if base_name:
            base = dict(np.load(folder / base_name, allow_pickle=False))
            for k in side.get("same_as_base", []):
                arrays.setdefault(k, base[k])
        cases.append(ParityCase(npz.stem, arrays, side, folder))
    return cases


def rel(a: Any, b: Any) -> float:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (nb if nb > 0 else 1.0))


def checkpoint_for(seed: int, folder: Path | None = None) -> Path:
    """Regenerate (once, cached, under a file lock so parallel runs share it) the parity checkpoint."""
    folder = spec_folder(folder or parity_dir())
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"parity-ckpt-seed{seed}"
    with open(CACHE / f"parity-ckpt-seed{seed}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "make_checkpoint.json").is_file():
            subprocess.run(
                [
                    sys.executable,
                    str(folder / "make_checkpoint.py"),
                    str(out),
                    "--spec",
                    str(folder),
                    "--seed",
                    str(seed),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    return out


def stored_front_outputs(engine: Any, case: ParityCase) -> tuple[np.ndarray, np.ndarray]:
    """(spk_cond_emb, style): the engine's w2v-BERT and CAMPPlus sessions on a vector set's stored
    features (the same keys in the v2 and 2.5 sets)."""
    spk = engine.session("w2v_bert").run(
        ["spk_cond_emb"],
        {"input_features": case["w2v_input_features"], "attention_mask": case["w2v_attention_mask"]},
    )["spk_cond_emb"]
    style = engine.session("campplus").run(["style"], {"fbank": case["campplus_fbank"][None]})["style"]
    return spk, style


def stored_cfm_inputs(case: ParityCase) -> Any:
    """The CFM's inputs (indextts2.engine.CFMInputs) from a vector set's stored condition, prompt mel
    and style, one row (the same keys in the v2 and 2.5 sets)."""
    from fasttts_cli.indextts2.engine import CFMInputs

    cat = case["s2mel_cat_condition"]
    return CFMInputs(
        cat_condition=cat,
        x_lens=np.array([cat.shape[1]]),
        prompt=case["refmel"],
        prompt_lens=np.array([case["refmel"].shape[-1]]),
        style=case["campplus_style"],
    )
