"""s2mel parity with the original (stages 1.7, 4.1-4.4 of tools/parity2/README.md), and batch == single."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from fasttts_cli.nets.s2mel import S2Mel, build_s2mel, load_s2mel, target_lengths  # noqa: E402
from fasttts_cli.nets.weights import CheckpointKeyError  # noqa: E402
from tests.parity import ParityCase, rel  # noqa: E402

pytestmark = pytest.mark.parity
TOL = 1e-4
_MODELS: dict[Path, S2Mel] = {}


def _config(ckpt: Path) -> dict:
    return yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def s2mel(parity_checkpoint: Path) -> S2Mel:
    torch.set_num_threads(1)
    if parity_checkpoint not in _MODELS:
        _MODELS[parity_checkpoint] = load_s2mel(
            parity_checkpoint / "s2mel.pth", _config(parity_checkpoint)["s2mel"]
        )
    return _MODELS[parity_checkpoint]


def t(case: ParityCase, key: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(case[key]))


def need(case: ParityCase, *keys: str) -> None:
    """Delta vector sets may hold only some stages; skip what this set does not cover."""
    missing = [k for k in keys if k not in case]
    if missing:
        pytest.skip(f"{case.name} has no {', '.join(missing)}")


def lens(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@torch.no_grad()
def test_prompt_condition(parity_case: ParityCase, s2mel: S2Mel) -> None:  # stage 1.7
    need(parity_case, "codec_S_ref", "refmel", "prompt_condition")
    s_ref = t(parity_case, "codec_S_ref")
    out = s2mel.prompt_condition(s_ref, lens(s_ref.shape[1]), lens(parity_case["refmel"].shape[-1]))
    assert rel(out, parity_case["prompt_condition"]) < TOL


def _check_content(case: ParityCase, s2mel: S2Mel, vq_emb: torch.Tensor) -> None:
    need(case, "gpt_latent", "s2mel_gpt_layer_out", "s2mel_S_infer", "s2mel_target_len", "s2mel_cond")
    latent = t(case, "gpt_latent")
    n = latent.shape[1]
    assert rel(s2mel.gpt_layer(latent), case["s2mel_gpt_layer_out"]) < TOL
    assert rel(vq_emb + s2mel.gpt_layer(latent), case["s2mel_S_infer"]) < TOL
    cond, ylens = s2mel.content(latent, vq_emb, lens(n))
    assert ylens.tolist() == case["s2mel_target_len"].tolist()
    assert rel(cond, case["s2mel_cond"]) < TOL
    cat = torch.cat([t(case, "prompt_condition"), cond], dim=1)
    assert rel(cat, case["s2mel_cat_condition"]) < TOL


@torch.no_grad()
def test_content_from_stored_vq2emb(parity_case: ParityCase, s2mel: S2Mel) -> None:  # stage 4.1, s2mel part
    need(parity_case, "s2mel_vq2emb")
    _check_content(parity_case, s2mel, t(parity_case, "s2mel_vq2emb"))


@torch.no_grad()
def test_content_with_codec_vq2emb(parity_case: ParityCase, s2mel: S2Mel, parity_checkpoint: Path) -> None:
    need(parity_case, "gpt_forced_codes", "s2mel_vq2emb")
    codec_mod = pytest.importorskip("fasttts_cli.nets.codec")  # the features engineer's module
    codec = codec_mod.load_codec(
        parity_checkpoint / "hf_cache" / "semantic_codec_model.safetensors",
        _config(parity_checkpoint)["semantic_codec"],
    )
    vq_emb = codec.vq2emb(t(parity_case, "gpt_forced_codes").view(1, -1))
    assert rel(vq_emb, parity_case["s2mel_vq2emb"]) < TOL
    _check_content(parity_case, s2mel, vq_emb)


def test_target_lengths_rule() -> None:
    n = torch.arange(0, 2000)
    got = target_lengths(n)
    assert got.dtype == torch.int64
    # floor(1.72 n) with 1.72 rounded to float32 first, as the original's tensor arithmetic does.
    want = np.floor(np.arange(0, 2000, dtype=np.float32) * np.float32(1.72)).astype(np.int64)
    assert got.tolist() == want.tolist()
    assert target_lengths(torch.tensor([20, 25, 100])).tolist() == [34, 43, 172]


@torch.no_grad()
def test_dit_one_call(parity_case: ParityCase, s2mel: S2Mel) -> None:  # stage 4.2
    c = parity_case
    need(
        c,
        "dit_in_x",
        "dit_in_prompt_x",
        "dit_in_x_lens",
        "dit_in_t",
        "dit_in_style",
        "dit_in_cond",
        "dit_out",
    )
    out = s2mel.cfm.estimator(
        t(c, "dit_in_x"),
        t(c, "dit_in_prompt_x"),
        t(c, "dit_in_x_lens"),
        t(c, "dit_in_t"),
        t(c, "dit_in_style"),
        t(c, "dit_in_cond"),
    )
    assert rel(out, c["dit_out"]) < TOL


def _ditm_inputs(c: ParityCase) -> tuple[torch.Tensor, ...]:
    need(
        c, "dit_in_x", "dit_in_prompt_x", "dit_in_style", "s2mel_cat_condition", "ditm_in_x_lens", "ditm_in_t"
    )
    x = t(c, "dit_in_x")
    prompt_x = t(c, "dit_in_prompt_x")[:1].repeat(2, 1, 1)
    style = t(c, "dit_in_style")[:1].repeat(2, 1)
    cond = t(c, "s2mel_cat_condition")[:1].repeat(2, 1, 1)
    return x, prompt_x, t(c, "ditm_in_x_lens"), t(c, "ditm_in_t"), style, cond


@torch.no_grad()
def test_dit_padded_rows(parity_case: ParityCase, s2mel: S2Mel) -> None:  # stage 4.3
    c = parity_case
    need(c, "ditm_out", "ditm_in_x_lens")
    x_lens = c["ditm_in_x_lens"]
    assert len(set(x_lens.tolist())) > 1, "the vectors should hold rows of different lengths"
    out = s2mel.cfm.estimator(*_ditm_inputs(c), row_padding=False)
    for b, n in enumerate(x_lens.tolist()):
        assert rel(out[b, :, :n], c["ditm_out"][b, :, :n]) < TOL


@torch.no_grad()
def test_dit_row_padding_equals_row_alone(parity_case: ParityCase, s2mel: S2Mel) -> None:
    x, prompt_x, x_lens, tt, style, cond = _ditm_inputs(parity_case)
    out = s2mel.cfm.estimator(x, prompt_x, x_lens, tt, style, cond)
    for b, n in enumerate(x_lens.tolist()):
        alone = s2mel.cfm.estimator(
            x[b : b + 1, :, :n],
            prompt_x[b : b + 1, :, :n],
            lens(n),
            tt[b : b + 1],
            style[b : b + 1],
            cond[b : b + 1, :n],
        )
        assert torch.allclose(out[b : b + 1, :, :n], alone, rtol=0, atol=1e-5), b


@torch.no_grad()
def test_cfm_25_steps(parity_case: ParityCase, s2mel: S2Mel) -> None:  # stage 4.4
    c = parity_case
    need(c, "s2mel_cat_condition", "refmel", "campplus_style", "cfm_z", "cfm_out_full", "cfm_mel")
    mu = t(c, "s2mel_cat_condition")
    tm = c["refmel"].shape[-1]
    n_steps = int(c["cfm_t_span"].shape[0]) - 1 if "cfm_t_span" in c else 25
    out, tr = s2mel.cfm.solve(
        mu,
        lens(mu.shape[1]),
        t(c, "refmel"),
        lens(tm),
        t(c, "campplus_style"),
        t(c, "cfm_z").clone(),
        n_steps=n_steps,
        cfg_rate=float(c["cfm_inference_cfg_rate"]) if "cfm_inference_cfg_rate" in c else 0.7,
        trace=True,
    )
    assert tr is not None
    if "cfm_step_t" in c:  # per-step record, to locate a divergence
        assert rel(tr.t, c["cfm_step_t"]) < 1e-6
        assert rel(tr.x[:, 0], c["cfm_step_x"]) < TOL
        assert rel(tr.v.view(n_steps, 2, *tr.v.shape[2:]), c["cfm_step_v"]) < TOL
    assert rel(out, c["cfm_out_full"]) < TOL
    assert rel(out[..., tm:], c["cfm_mel"]) < TOL
    assert float(out[..., :tm].abs().max()) == 0.0


@torch.no_grad()
def test_length_regulator_batched_equals_single(parity_case: ParityCase, s2mel: S2Mel) -> None:
    need(parity_case, "codec_S_ref")
    s_ref = t(parity_case, "codec_S_ref")[0]
    rows = [(s_ref, 215), (s_ref[:57], 98), (s_ref[:20], 34)]
    n_max = max(r.shape[0] for r, _ in rows)
    x = torch.stack([torch.nn.functional.pad(r, (0, 0, 0, n_max - r.shape[0])) for r, _ in rows])
    x[1, 57:] = 1e3  # padding content must not leak
    batched = s2mel.length_regulator(x, lens(*(r.shape[0] for r, _ in rows)), lens(*(y for _, y in rows)))
    for b, (r, y) in enumerate(rows):
        alone = s2mel.length_regulator(r[None], lens(r.shape[0]), lens(y))
        assert torch.allclose(batched[b : b + 1, :y], alone, rtol=0, atol=1e-5)
        assert int(torch.count_nonzero(batched[b, y:])) == 0


@torch.no_grad()
def test_cfm_batched_equals_single(parity_case: ParityCase, s2mel: S2Mel) -> None:
    """Rows with different prompt and content lengths, padded in one batch, equal each row run alone."""
    c = parity_case
    need(c, "s2mel_cat_condition", "refmel", "campplus_style", "cfm_z")
    mu_full, ref, style = t(c, "s2mel_cat_condition")[0], t(c, "refmel")[0], t(c, "campplus_style")[0]
    tm, z_full = ref.shape[-1], t(c, "cfm_z")[0]
    # (prompt frames, content frames) per row; the second row has a shorter prompt and content.
    shapes = [(tm, mu_full.shape[0] - tm), (tm - 40, 21)]
    rows = []
    for p, g in shapes:
        mu = torch.cat([mu_full[:p], mu_full[tm : tm + g]])
        z = torch.cat([z_full[:, :p], z_full[:, tm : tm + g]], dim=1)
        rows.append((mu, ref[:, :p], z))
    t_max = max(mu.shape[0] for mu, _, _ in rows)
    p_max = max(r.shape[-1] for _, r, _ in rows)
    pad_t = lambda a, n: torch.nn.functional.pad(a, (0, n - a.shape[-1]))  # noqa: E731
    steps = 6
    out, _ = s2mel.cfm.solve(
        torch.stack([pad_t(mu.T, t_max).T for mu, _, _ in rows]),
        lens(*(mu.shape[0] for mu, _, _ in rows)),
        torch.stack([pad_t(r, p_max) for _, r, _ in rows]),
        lens(*(p for p, _ in shapes)),
        torch.stack([style, style * 0.5]),
        torch.stack([pad_t(z, t_max) for _, _, z in rows]),
        n_steps=steps,
    )
    for b, (mu, r, z) in enumerate(rows):
        alone, _ = s2mel.cfm.solve(
            mu[None],
            lens(mu.shape[0]),
            r[None],
            lens(r.shape[-1]),
            (style * (1.0 - 0.5 * b))[None],
            z[None],
            steps,
        )
        n = mu.shape[0]
        assert torch.allclose(out[b : b + 1, :, :n], alone, rtol=0, atol=1e-5), b
        assert int(torch.count_nonzero(out[b, :, n:])) == 0


def test_official_state_dict_round_trip(parity_checkpoint: Path, s2mel: S2Mel) -> None:
    net = torch.load(parity_checkpoint / "s2mel.pth", map_location="cpu", weights_only=True)["net"]
    ours = s2mel.official_state_dict()
    assert set(ours) == {"cfm", "length_regulator", "gpt_layer"}
    for part, sd in ours.items():
        assert {k: tuple(v.shape) for k, v in sd.items()} == {k: tuple(v.shape) for k, v in net[part].items()}
    again = build_s2mel(_config(parity_checkpoint)["s2mel"], ours, Path("roundtrip"))
    theirs = dict(again.named_parameters())
    for k, a in s2mel.named_parameters():
        assert rel(theirs[k].detach(), a.detach()) < 1e-6, k
    # The folded weights are what the file's g/v fold to (not v itself).
    w = s2mel.cfm.estimator.wavenet.in_layers[0].conv.conv.weight.detach()
    v = net["cfm"]["estimator.wavenet.in_layers.0.conv.conv.weight_v"]
    assert rel(w, v) > 1e-2


def test_loader_names_missing_and_unexpected_keys(parity_checkpoint: Path) -> None:
    cfg = _config(parity_checkpoint)["s2mel"]
    net = torch.load(parity_checkpoint / "s2mel.pth", map_location="cpu", weights_only=True)["net"]
    broken = {k: dict(v) for k, v in net.items()}
    del broken["cfm"]["estimator.wavenet.cond_layer.conv.conv.weight_g"]
    with pytest.raises(CheckpointKeyError, match=r"s2mel\.pth.*net/cfm/estimator\.wavenet\.cond_layer"):
        build_s2mel(cfg, broken, parity_checkpoint / "s2mel.pth")
    extra = {k: dict(v) for k, v in net.items()}
    extra["length_regulator"]["bogus.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointKeyError, match=r"net/length_regulator/bogus\.weight"):
        build_s2mel(cfg, extra, parity_checkpoint / "s2mel.pth")
    wrong = dict(cfg, DiT=dict(cfg["DiT"], depth=cfg["DiT"]["depth"] + 1))
    with pytest.raises(CheckpointKeyError, match=r"missing key net/cfm/estimator\.transformer\.layers"):
        build_s2mel(wrong, net, parity_checkpoint / "s2mel.pth")


@pytest.mark.slow
def test_full_size_parameter_counts() -> None:
    """The release config (spec §1.2) builds modules with exactly the spec's §3.2 parameter counts."""
    full = {
        "dit_type": "DiT",
        "style_encoder": {"dim": 192},
        "length_regulator": {
            "channels": 512,
            "is_discrete": False,
            "in_channels": 1024,
            "content_codebook_size": 2048,
            "sampling_ratios": [1, 1, 1, 1],
            "vector_quantize": False,
            "n_codebooks": 1,
            "f0_condition": False,
        },
        "DiT": {
            "hidden_dim": 512,
            "num_heads": 8,
            "depth": 13,
            "in_channels": 80,
            "style_condition": True,
            "final_layer_type": "wavenet",
            "content_dim": 512,
            "content_codebook_size": 1024,
            "f0_condition": False,
            "is_causal": False,
            "long_skip_connection": True,
            "time_as_token": False,
            "style_as_token": False,
            "uvit_skip_connection": True,
        },
        "wavenet": {
            "hidden_dim": 512,
            "num_layers": 8,
            "kernel_size": 5,
            "dilation_rate": 1,
            "style_condition": True,
        },
    }
    from fasttts_cli.nets.dit import DiT, DiTConfig
    from fasttts_cli.nets.s2mel import CFM, GptLayer, LengthRegulator
    from fasttts_cli.nets.wavenet import WaveNetConfig

    wn = full["wavenet"]
    dit = DiT(
        DiTConfig(
            hidden_dim=512,
            num_heads=8,
            depth=13,
            in_channels=80,
            content_dim=512,
            style_dim=192,
            content_codebook_size=1024,
            max_positions=16384,
            freq_embed_dim=256,
            wavenet=WaveNetConfig(
                wn["hidden_dim"], wn["num_layers"], wn["kernel_size"], wn["dilation_rate"], 512
            ),
        )
    )
    buffers = {"estimator.input_pos", "estimator.t_embedder.freqs", "estimator.t_embedder2.freqs"}
    cfm_sd = CFM(dit).state_dict()
    assert sum(v.numel() for k, v in cfm_sd.items() if k not in buffers) == 98_187_344
    assert dit.cfg.ffn_hidden == 1536
    assert dit.skip_plan == {7: 5, 8: 4, 9: 3, 10: 2, 11: 1, 12: 0}
    assert sum(v.numel() for v in LengthRegulator(1024, 512, 4, 2048).state_dict().values()) == 4_988_416
    assert sum(v.numel() for v in GptLayer([1280, 256, 128, 1024]).state_dict().values()) == 492_928
    # the same sizes through the loader's config reading: a wrong-shaped file is refused by key
    net = {"cfm": cfm_sd, "length_regulator": LengthRegulator(1024, 512, 4, 2048).state_dict()}
    net["gpt_layer"] = GptLayer([1280, 256, 128, 1024]).state_dict()
    model = build_s2mel(full, net, Path("full-size"))
    assert model.cfm.estimator.cfg.depth == 13
