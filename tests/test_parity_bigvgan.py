"""BigVGAN parity with the original (stage 5 of tools/parity2/README.md), batch == single, round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fasttts_cli.nets.bigvgan import BigVGAN, BigVGANConfig, load_bigvgan, wav_to_int16  # noqa: E402
from fasttts_cli.nets.weights import CheckpointKeyError  # noqa: E402
from tests.parity import ParityCase, rel  # noqa: E402

pytestmark = pytest.mark.parity
_MODELS: dict[Path, BigVGAN] = {}


@pytest.fixture
def vocoder(parity_checkpoint: Path) -> BigVGAN:
    torch.set_num_threads(1)
    if parity_checkpoint not in _MODELS:
        _MODELS[parity_checkpoint] = load_bigvgan(parity_checkpoint / "hf_cache" / "bigvgan")
    return _MODELS[parity_checkpoint]


def _mel(case: ParityCase) -> torch.Tensor:
    if "cfm_mel" not in case:
        pytest.skip(f"{case.name} has no cfm_mel")
    return torch.from_numpy(np.ascontiguousarray(case["cfm_mel"]))


@torch.no_grad()
def test_bigvgan_stage5(parity_case: ParityCase, vocoder: BigVGAN) -> None:
    mel = _mel(parity_case)
    wav = vocoder(mel)
    assert wav.shape == (1, 1, vocoder.cfg.hop * mel.shape[-1])
    if "bigvgan_wav" in parity_case:
        assert rel(wav, parity_case["bigvgan_wav"]) < 1e-4
    if "wav_int16" in parity_case:
        pcm = wav_to_int16(wav[:, 0]).numpy()
        assert pcm.dtype == np.int16
        assert np.abs(pcm.astype(np.int32) - parity_case["wav_int16"].astype(np.int32)).max() <= 1


def test_int16_rule() -> None:
    wav = torch.tensor([1.5, 1.0, 0.99999, 0.5, 1e-6, -1e-6, -0.5, -1.0, -2.0])
    assert wav_to_int16(wav).tolist() == [32767, 32767, 32766, 16383, 0, 0, -16383, -32767, -32767]


@torch.no_grad()
def test_bigvgan_batched_equals_single(parity_case: ParityCase, vocoder: BigVGAN) -> None:
    """Rows of different lengths, zero- and garbage-padded in one batch, equal each row alone."""
    mel = _mel(parity_case)[0]
    rows = [mel, mel[:, 3:24] * 0.9, mel[:, :9]]
    t_max = max(r.shape[-1] for r in rows)
    batch = torch.full((len(rows), mel.shape[0], t_max), 7.0)  # padding content must not leak
    for b, r in enumerate(rows):
        batch[b, :, : r.shape[-1]] = r
    lengths = torch.tensor([r.shape[-1] for r in rows])
    out = vocoder(batch, lengths)
    hop = vocoder.cfg.hop
    for b, r in enumerate(rows):
        alone = vocoder(r[None])
        n = hop * r.shape[-1]
        assert torch.allclose(out[b : b + 1, :, :n], alone, rtol=0, atol=1e-5), b
        assert int(torch.count_nonzero(out[b, :, n:])) == 0
    # lengths == T everywhere is the plain computation
    assert torch.allclose(
        vocoder(mel[None], torch.tensor([mel.shape[-1]])), vocoder(mel[None]), rtol=0, atol=1e-6
    )


def test_official_state_dict_round_trip(parity_checkpoint: Path, vocoder: BigVGAN) -> None:
    folder = parity_checkpoint / "hf_cache" / "bigvgan"
    sd = torch.load(folder / "bigvgan_generator.pt", map_location="cpu", weights_only=True)["generator"]
    ours = vocoder.official_state_dict()
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in sd.items()}
    # the fixed anti-alias filters come from the file verbatim
    key = "resblocks.0.activations.0.upsample.filter"
    assert torch.equal(ours[key], sd[key])
    # and a fresh module starts with the same kernels (a generated checkpoint must carry the real ones)
    fresh = BigVGAN(vocoder.cfg).state_dict()
    for k in (key, "activation_post.downsample.lowpass.filter"):
        assert torch.allclose(fresh[k], sd[k], rtol=0, atol=1e-7), k
    again = BigVGAN(vocoder.cfg)
    again.load_state_dict(ours, strict=True)
    theirs = dict(again.named_parameters())
    for k, p in vocoder.named_parameters():
        assert rel(theirs[k].detach(), p.detach()) < 1e-6, k
    # ConvTranspose1d weight norm is per input channel (dim 0 of its (in, out, k) weight)
    assert tuple(ours["ups.0.0.weight_g"].shape) == (vocoder.cfg.upsample_initial_channel, 1, 1)


def test_loader_errors_name_file_and_key(parity_checkpoint: Path, tmp_path: Path) -> None:
    src = parity_checkpoint / "hf_cache" / "bigvgan"
    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    sd = dict(torch.load(src / "bigvgan_generator.pt", map_location="cpu", weights_only=True)["generator"])
    del sd["resblocks.1.activations.2.act.beta"]
    (tmp_path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    torch.save({"generator": sd}, tmp_path / "bigvgan_generator.pt")
    with pytest.raises(
        CheckpointKeyError, match=r"bigvgan_generator\.pt.*resblocks\.1\.activations\.2\.act\.beta"
    ):
        load_bigvgan(tmp_path)


def test_sizes_come_from_config() -> None:
    cfg = BigVGANConfig(
        num_mels=5,
        upsample_initial_channel=8,
        upsample_rates=(3, 2),
        upsample_kernel_sizes=(7, 4),
        resblock_kernel_sizes=(3,),
        resblock_dilation_sizes=((1, 2),),
        use_tanh_at_final=False,
    )
    model = BigVGAN(cfg).eval()
    with torch.no_grad():
        wav = model(torch.randn(2, 5, 7))
    assert wav.shape == (2, 1, 6 * 7)
    assert float(wav.abs().max()) <= 1.0


@pytest.mark.slow
def test_full_size_parameter_count() -> None:
    """nvidia/bigvgan_v2_22khz_80band_256x's sizes give the spec's §3.5 count of 112,231,249 parameters."""
    h = {
        "resblock": "1",
        "num_mels": 80,
        "upsample_initial_channel": 1536,
        "upsample_rates": [4, 4, 2, 2, 2, 2],
        "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
        "resblock_kernel_sizes": [3, 7, 11],
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "activation": "snakebeta",
        "snake_logscale": True,
        "use_tanh_at_final": False,
        "use_bias_at_final": False,
    }
    model = BigVGAN(BigVGANConfig.from_json(h))
    assert model.cfg.hop == 256
    assert sum(v.numel() for k, v in model.state_dict().items() if not k.endswith("filter")) == 112_231_249
