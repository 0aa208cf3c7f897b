"""s2mel cache on a real engine folder (the parity checkpoint's): pieces beside the single-graph DiT,
`calibrate(engine_dir, voices, texts)` end to end, and the engine hook `CachedCFM.for_engine`."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
yaml = pytest.importorskip("yaml")

from tests.conftest_engine import parity_engine_for  # noqa: E402
from tests.parity import checkpoint_for, load_cases  # noqa: E402

pytestmark = [pytest.mark.parity, pytest.mark.slow]


def _linked_copy(src: Path, dst: Path) -> Path:
    """The engine folder with its big files linked (the test writes only pieces, policy and manifest)."""
    dst.mkdir()
    for p in src.iterdir():
        if p.name == "manifest.json":
            shutil.copyfile(p, dst / p.name)
        else:
            (dst / p.name).symlink_to(p.resolve())
    return dst


def test_calibrate_engine_folder(tmp_path: Path) -> None:
    from fasttts_cli.build.s2mel_pieces import PIECES_DIR, export_pieces_into_engine
    from fasttts_cli.indextts2.calibrate_engine import calibrate, engine_rows
    from fasttts_cli.indextts2.cfm import ort_opener
    from fasttts_cli.indextts2.engine import DIT_CFG_STEP, IndexTTS2Engine
    from fasttts_cli.indextts2.s2mel_cache import piecewise_ort as po
    from fasttts_cli.indextts2.s2mel_cache.calibrate import stack_rows
    from fasttts_cli.indextts2.s2mel_cache.policy import engine_identity, read_policy_set
    from fasttts_cli.nets.s2mel import load_s2mel
    from fasttts_cli.spec.engine_folder import read_manifest

    cases = load_cases()  # one engine is enough: the first vector set's (not one test per set, skipping)
    if not cases:
        pytest.skip("no parity vectors (set FASTTTS_PARITY_DIR)")
    parity_case, parity_checkpoint = cases[0], checkpoint_for(cases[0].weight_seed)
    torch.set_num_threads(1)
    engine_dir = _linked_copy(parity_engine_for(parity_case), tmp_path / "engine")
    cfg = yaml.safe_load((parity_checkpoint / "config.yaml").read_text(encoding="utf-8"))["s2mel"]
    dit = load_s2mel(parity_checkpoint / "s2mel.pth", cfg).cfm.estimator
    export_pieces_into_engine(engine_dir, dit)
    assert read_manifest(engine_dir).files["s2mel_pieces"] == f"{PIECES_DIR}/pieces.json"

    voice = parity_case.spec / "ref.wav"
    engine = IndexTTS2Engine.load(engine_dir, threads=1)
    rows = engine_rows(engine, [voice], ["HELLO WORLD."], seed=3, max_codes=12)
    # T0 on the pieces == the engine's single-graph CFG step, on the engine's own CFM inputs
    b = stack_rows(rows[:1], 3)
    pieces = po.OrtPieces.load(engine_dir / PIECES_DIR, ort_opener(1))
    steps = 4
    got = po.solve(pieces, b["mu"], b["x_lens"], b["prompt"], b["prompt_lens"], b["style"], b["z"], steps)
    from fasttts_cli.indextts2.engine import CFMInputs

    inp = CFMInputs(b["mu"], b["x_lens"], b["prompt"], b["prompt_lens"], b["style"])
    want = engine.cfm(inp, b["z"], steps)
    assert DIT_CFG_STEP in engine.manifest.components
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))

    ps = calibrate(
        engine_dir, [voice], ["HELLO WORLD."], ["T4"], seed=3, threads=1, max_codes=12, max_trials=8
    )
    assert ps.engine_id == engine_identity(read_manifest(engine_dir))
    assert read_policy_set(engine_dir) == ps
    s2 = engine.preset.s2mel
    assert ps.steps == s2.steps and ps.schedule == s2.schedule
    t4 = replace(s2, cache_level="T4")
    hook = po.CachedCFM.for_engine(engine_dir, read_manifest(engine_dir), t4, ort_opener(1))
    assert hook is not None and hook.plan == ps.levels["T4"]
    # preset level T0
    assert po.CachedCFM.for_engine(engine_dir, read_manifest(engine_dir), s2, ort_opener(1)) is None
    # the engine's cached CFM runs the one loop through the policy's pieces
    cached = engine.cfm(inp, b["z"], s2.steps, s2.cfg_rate, s2.schedule, cache_level="T4")
    plain = engine.cfm(inp, b["z"], s2.steps, s2.cfg_rate, s2.schedule, cache_level="T0")
    assert cached.shape == plain.shape and np.isfinite(cached).all()
