"""The torch backend's stages against the original's parity vectors (fp32 at the README's tolerances;
bf16 at the stated half-precision tolerances), and a whole line through `TorchSynthesizer` on the parity
checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from fasttts_cli.tools.parity_torch import check_case, format_checks  # noqa: E402
from tests.parity import ParityCase  # noqa: E402

pytestmark = pytest.mark.parity
_MODELS: dict[Path, tuple] = {}


@pytest.fixture
def modules(parity_checkpoint: Path) -> tuple:
    from fasttts_cli.nets.bigvgan import load_bigvgan
    from fasttts_cli.nets.s2mel import load_s2mel
    from fasttts_cli.nets.unified_voice import load_unified_voice

    torch.set_num_threads(1)
    if parity_checkpoint not in _MODELS:
        cfg = yaml.safe_load((parity_checkpoint / "config.yaml").read_text(encoding="utf-8"))
        _MODELS[parity_checkpoint] = (
            load_unified_voice(parity_checkpoint / "gpt.pth", cfg["gpt"]),
            load_s2mel(parity_checkpoint / "s2mel.pth", cfg["s2mel"]),
            load_bigvgan(parity_checkpoint / "hf_cache" / "bigvgan"),
        )
    return _MODELS[parity_checkpoint]


def test_stages_fp32(parity_case: ParityCase, modules: tuple) -> None:
    checks = check_case(parity_case.arrays, *modules, precision="fp32")
    assert len(checks) >= 11
    assert all(c.ok for c in checks), format_checks(checks, parity_case.name)


@pytest.mark.slow
def test_stages_bf16(parity_case: ParityCase, modules: tuple) -> None:
    checks = check_case(parity_case.arrays, *modules, precision="bf16")
    assert all(c.ok for c in checks), format_checks(checks, parity_case.name)
    gpt = next(c for c in checks if c.what == "generation logits")
    assert gpt.value > 1e-5  # it really ran in bf16


@pytest.mark.slow
def test_synthesizer_line_on_parity_checkpoint(parity_checkpoint: Path, tmp_path: Path) -> None:
    import dataclasses

    from fasttts_cli.indextts2.synthesizer_torch import TorchSynthesizer
    from fasttts_cli.spec.presets import ComponentSpec, load_preset
    from fasttts_cli.synth.synthesizer import SynthRequest

    torch.set_num_threads(2)
    p = load_preset("gpu-torch-fp16")
    p = dataclasses.replace(p, components={k: ComponentSpec("torch", "fp32") for k in p.components})
    p = p.with_run_keys(decode={"max_tokens": 12, "beams": 1})
    s = TorchSynthesizer.load(parity_checkpoint, p, device="cpu", cache_dir=tmp_path)
    v = s.prepare_voice(parity_checkpoint / "ref.wav")
    assert s.last_voice_cached is False
    reqs = [SynthRequest("a", "HELLO WORLD.", v, 1), SynthRequest("b", "THIS IS A TEST", v, 2, {"beams": 3})]
    res = s.synthesize(reqs)
    for r in res:
        assert r.ok and r.sample_rate == 22050
        n = r.n_tokens
        assert r.audio.shape == (256 * int(np.float32(n) * np.float32(1.72)),)
    alone = s.synthesize(reqs[:1])[0]
    np.testing.assert_allclose(alone.audio, res[0].audio, atol=1e-5)  # batch == single
    s.prepare_voice(parity_checkpoint / "ref.wav")
    assert s.last_voice_cached is True
    assert "torch" in s.identity() and s.name == "torch"
