"""The committed IndexTTS-2.5 oracle vectors are self-consistent (tests/data/parity25, tools/parity25).

These are not parity tests of fasttts: they guard the files the parity tests read, so a truncated or
hand-edited vector set fails here first.
"""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "parity25"
SPEC = ROOT / "tools" / "parity25" / "keys25.json"


@pytest.fixture(scope="module")
def vectors() -> tuple[dict, dict]:
    sidecar = json.loads((DATA / "vectors25_s0.json").read_text(encoding="utf-8"))
    with np.load(DATA / "vectors25_s0.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return sidecar, arrays


def test_every_listed_key_exists_with_its_shape_and_dtype(vectors: tuple[dict, dict]) -> None:
    sidecar, arrays = vectors
    assert set(sidecar["keys"]) == set(arrays)
    for key, meta in sidecar["keys"].items():
        assert list(arrays[key].shape) == meta["shape"], key
        assert str(arrays[key].dtype) == meta["dtype"], key
        assert meta["stage"] in sidecar["stages"] and key in sidecar["stages"][meta["stage"]], key
        assert meta["role"] in {"input", "output", "both", "info"}, key


def test_arrays_use_the_parity_dtypes_and_are_finite(vectors: tuple[dict, dict]) -> None:
    _, arrays = vectors
    for key, a in arrays.items():
        assert a.dtype.kind in "fiU", key
        if a.dtype.kind == "f":
            assert a.dtype == np.float32 and np.isfinite(a).all(), key
        elif a.dtype.kind == "i":
            assert a.dtype == (np.int16 if key.startswith(("wav_int16", "e2e_wav_int16")) else np.int64), key


def test_vectors_belong_to_the_committed_checkpoint_spec(vectors: tuple[dict, dict]) -> None:
    sidecar, _ = vectors
    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    assert sidecar["checkpoint_digest"] == spec["checkpoint_digest"]
    assert sidecar["checkpoint_seed"] == spec["digest_seed"]


def test_the_original_run_passed_its_self_checks(vectors: tuple[dict, dict]) -> None:
    sidecar, arrays = vectors
    c = sidecar["checks"]
    for name in (
        "weights_fully_loaded",
        "gpt_forced_codes_reproduced",
        "gpt_prefix_is_pad_conds_text",
        "e2e_text_tokens_equal_stage2",
        "e2e_df1_equals_staged_wav",
    ):
        assert c[name] is True, name
    assert all(c["e2e_caches_equal_stages"].values())
    assert c["gpt_nocache_vs_kvcache_rel"] < 1e-5
    assert c["low_vram"] is False and c["use_bf16"] is False
    n = len(arrays["gpt_forced_codes"])
    assert arrays["s2mel_S_infer"].shape[1] == 2 * n
    assert int(arrays["s2mel_target_len_df1p0"]) == int(2 * n * 1.72)
    assert arrays["wav_int16"].shape[-1] == 256 * int(arrays["s2mel_target_len_df1p0"])
