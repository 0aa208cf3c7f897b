"""The committed IndexTTS-2.5 oracle vectors are self-consistent (tests/data/parity25, tools/parity25).

These are not parity tests of fasttts: they guard the files the parity tests read, so a truncated or
hand-edited vector set fails here first.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("FASTTTS_PARITY25_DIR", ROOT / "tests" / "data" / "parity25")).resolve()
SPEC = ROOT / "tools" / "parity25" / "keys25.json"


def _load(name: str) -> tuple[dict, dict]:
    sidecar = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    with np.load(DATA / f"{name}.npz", allow_pickle=False) as z:
        return sidecar, {k: z[k] for k in z.files}


@pytest.fixture(scope="module", params=sorted(p.stem for p in DATA.glob("vectors25_*.npz")))
def vectors(request: pytest.FixtureRequest) -> tuple[dict, dict]:
    """(sidecar, the arrays the set's own file stores)."""
    return _load(request.param)


def _full(sidecar: dict, arrays: dict) -> dict:
    """A delta set's arrays with the base's same_as_base keys added."""
    if not sidecar.get("base"):
        return arrays
    _, base = _load(Path(sidecar["base"]).stem)
    return {**{k: base[k] for k in sidecar["same_as_base"]}, **arrays}


def test_delta_sets_store_only_what_differs(vectors: tuple[dict, dict]) -> None:
    sidecar, arrays = vectors
    if not sidecar.get("base"):
        assert "same_as_base" not in sidecar
        return
    base_side, base = _load(Path(sidecar["base"]).stem)
    assert sidecar["checkpoint_digest"] == base_side["checkpoint_digest"]
    assert set(sidecar["same_as_base"]) <= set(base) and not set(sidecar["same_as_base"]) & set(arrays)
    for key, a in arrays.items():  # a stored key that equals the base's belongs in same_as_base
        assert key in base and a.dtype == base[key].dtype, key
        assert a.shape != base[key].shape or not np.array_equal(a, base[key]), key
    listed = {k for keys in sidecar["stages"].values() for k in keys}
    assert listed == set(arrays) | set(sidecar["same_as_base"])


def test_every_listed_key_exists_with_its_shape_and_dtype(vectors: tuple[dict, dict]) -> None:
    sidecar, arrays = vectors
    assert set(sidecar["keys"]) == set(arrays)
    for key, meta in sidecar["keys"].items():
        assert list(arrays[key].shape) == meta["shape"], key
        assert str(arrays[key].dtype) == meta["dtype"], key
        assert meta["stage"] in sidecar["stages"] and key in sidecar["stages"][meta["stage"]], key
        assert meta["role"] in {"input", "output", "both", "info"}, key
    assert not sidecar.get("stages_absent")  # every stage of delta §13.2 and the v2 set is there


def test_arrays_use_the_parity_dtypes_and_are_finite(vectors: tuple[dict, dict]) -> None:
    sidecar, arrays = vectors
    for key, a in arrays.items():
        assert a.dtype.kind in "fiU", key
        if sidecar["keys"][key]["stage"] == "3.6":  # processor scores: -inf marks a removed token
            assert a.dtype == np.float32 and not np.isnan(a).any() and not np.isposinf(a).any(), key
            assert np.isfinite(a).sum(axis=-1).min() >= 1, key  # every row keeps a token
        elif a.dtype.kind == "f":
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
    arrays = _full(sidecar, arrays)
    c = sidecar["checks"]
    for name in (
        "weights_fully_loaded",
        "gpt_forced_codes_reproduced",
        "gpt_prefix_is_pad_conds_text",
        "e2e_text_tokens_equal_stage2",
        "e2e_df1_equals_staged_wav",
        "emo_vec_infer_equals_stage",
    ):
        assert c[name] is True, name
    for mode in c["logits_processors"].values():
        assert mode["first_call_history_is_fake_ids"] and mode["first_call_scores_rel"] == 0.0
    if sidecar.get("base"):  # with the codes forced, an emotion audio cannot reach the s2mel side
        assert c["e2e_wav_equals_base"] is True and c["e2e_emo_cond_equals_stage"] is True
    assert all(c["e2e_caches_equal_stages"].values())
    assert c["gpt_nocache_vs_kvcache_rel"] < 1e-5
    assert c["low_vram"] is False and c["use_bf16"] is False
    if sidecar.get("base"):
        assert not set(arrays) & {
            k for s in sidecar["stages_not_repeated"] for k in sidecar["stages"].get(s, [])
        }
        return
    n = len(arrays["gpt_forced_codes"])
    assert arrays["s2mel_S_infer"].shape[1] == 2 * n
    assert int(arrays["s2mel_target_len_df1p0"]) == int(2 * n * 1.72)
    assert arrays["wav_int16"].shape[-1] == 256 * int(arrays["s2mel_target_len_df1p0"])
