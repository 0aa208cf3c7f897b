"""Loaders of the feature-side models (w2v-BERT, codec, CAMPPlus) on tiny random files in the official
formats: strict keys (errors name the file and the key), sizes from the tensors, and w2v-BERT cut at layer
17 matching transformers' own `hidden_states[17]` on a padded batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from fasttts_cli.errors import InputError  # noqa: E402
from fasttts_cli.nets.weights import CheckpointKeyError  # noqa: E402


def _gen(seed: int = 0) -> torch.Generator:
    torch.set_num_threads(1)
    return torch.Generator().manual_seed(seed)


def _randomize(module: torch.nn.Module, seed: int = 0) -> None:
    g = _gen(seed)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if t.is_floating_point():
                noise = torch.randn(t.shape, generator=g)
                t.copy_(0.5 + 0.5 * noise.abs() if name.endswith("running_var") else 0.2 * noise)


@pytest.fixture
def tiny_w2v(tmp_path: Path) -> tuple[Path, Path, torch.nn.Module]:
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    cfg = Wav2Vec2BertConfig(
        hidden_size=32,
        num_hidden_layers=19,  # more than 17: the loader must skip the extra layers' keys
        num_attention_heads=4,
        intermediate_size=16,
        position_embeddings_type="relative_key",
        add_adapter=False,
    )
    cfg._attn_implementation = "eager"
    model = Wav2Vec2BertModel(cfg).eval()
    _randomize(model)
    folder = tmp_path / "w2v-bert-2.0"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()), encoding="utf-8")
    safetensors_torch.save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors"
    )
    g = _gen(1)
    stats = {"mean": 0.1 * torch.randn(32, generator=g), "var": 0.5 + torch.rand(32, generator=g)}
    torch.save(stats, tmp_path / "wav2vec2bert_stats.pt")
    return folder, tmp_path / "wav2vec2bert_stats.pt", model


def test_w2v_bert_cut_at_17_matches_transformers(tiny_w2v) -> None:
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    folder, stats_path, full = tiny_w2v
    ours = load_w2v_bert(folder, stats_path)
    assert len(ours.model.encoder.layers) == 17
    g = _gen(2)
    feats = torch.randn(2, 23, 160, generator=g)
    mask = torch.ones(2, 23, dtype=torch.int64)
    mask[1, 15:] = 0
    stats = torch.load(stats_path, weights_only=True)
    with torch.no_grad():
        # transformers' own forward on the uncut model, with its own mask handling
        h17 = full(feats, attention_mask=mask, output_hidden_states=True).hidden_states[17]
        expect = (h17 - stats["mean"]) / torch.sqrt(stats["var"])
        got = ours(feats, mask)
    valid = mask.bool()
    assert torch.allclose(got[valid], expect[valid], rtol=1e-4, atol=1e-5)
    # the padded row's valid frames equal the same row run alone
    with torch.no_grad():
        alone = ours(feats[1:, :15], mask[1:, :15])
    assert (got[1, :15] - alone[0]).abs().max().item() < 1e-4


def test_w2v_bert_all_layers_runs_the_originals_depth_and_reads_17(tiny_w2v) -> None:
    """The bench's eager side: every layer built and run (as the original does), layer 17 read."""
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    folder, stats_path, _ = tiny_w2v
    cut, every = load_w2v_bert(folder, stats_path), load_w2v_bert(folder, stats_path, all_layers=True)
    assert len(every.model.encoder.layers) == every.depth == 19 and every.layer == 17
    feats = torch.randn(1, 20, 160, generator=_gen(3))
    mask = torch.ones(1, 20, dtype=torch.int64)
    calls: list[int] = []
    for i, block in enumerate(every.model.encoder.layers):
        block.register_forward_hook(lambda *_, i=i: calls.append(i))
    with torch.no_grad():
        assert torch.equal(every(feats, mask), cut(feats, mask))
    assert calls == list(range(19))


def test_w2v_bert_missing_key_names_file_and_key(tiny_w2v) -> None:
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    folder, stats_path, _ = tiny_w2v
    state = safetensors_torch.load_file(folder / "model.safetensors")
    del state["encoder.layers.3.ffn1.intermediate_dense.weight"]
    safetensors_torch.save_file(state, folder / "model.safetensors")
    with pytest.raises(CheckpointKeyError) as err:
        load_w2v_bert(folder, stats_path)
    assert "model.safetensors" in str(err.value)
    assert "encoder.layers.3.ffn1.intermediate_dense.weight" in str(err.value)


def test_w2v_bert_too_few_layers_is_an_error(tiny_w2v) -> None:
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    folder, stats_path, _ = tiny_w2v
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    cfg["num_hidden_layers"] = 12
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(InputError, match="layer 17"):
        load_w2v_bert(folder, stats_path)


def _tiny_codec_file(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    from fasttts_cli.nets.codec import SemanticCodec
    from fasttts_cli.nets.config import SemanticCodecConfig

    sizes = SemanticCodecConfig(
        codebook_size=8192,
        hidden_size=1024,
        codebook_dim=8,
        vocos_dim=16,
        vocos_intermediate_dim=24,
        vocos_num_layers=2,
    )
    codec = SemanticCodec(sizes).eval()
    _randomize(codec, seed=3)
    path = tmp_path / "semantic_codec_model.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in codec.state_dict().items()}, path)
    return path, codec


def test_codec_loads_sizes_from_tensors_and_checks_config(tmp_path: Path) -> None:
    from fasttts_cli.nets.codec import load_codec

    path, ref = _tiny_codec_file(tmp_path)
    codec = load_codec(path, {"vocos_dim": 16, "vocos_num_layers": 2, "codebook_size": 8192})
    assert (codec.sizes.vocos_dim, codec.sizes.vocos_intermediate_dim, codec.sizes.vocos_num_layers) == (
        16,
        24,
        2,
    )
    x = torch.randn(1, 9, 1024, generator=_gen(4))
    with torch.no_grad():
        z, idx, s = codec.quantize(x)
        z_r, idx_r, s_r = ref.quantize(x)
        emb = codec.vq2emb(idx)
    assert torch.equal(z, z_r) and torch.equal(idx, idx_r) and torch.allclose(s, s_r)
    # S is out_project(codebook[idx]): the same as vq2emb of the chosen codes
    assert torch.allclose(s, emb, atol=1e-6)
    # the index is the nearest code by cosine (L2-normalised distance), not by raw distance
    cos = (
        torch.nn.functional.normalize(z[0].T, dim=-1)
        @ torch.nn.functional.normalize(codec.vq.codebook.weight, dim=-1).T
    )
    np.testing.assert_array_equal(idx[0].numpy(), cos.argmax(-1).numpy())
    with pytest.raises(InputError, match="vocos_dim"):
        load_codec(path, {"vocos_dim": 384})


def test_codec_unused_decoder_keys_are_still_required(tmp_path: Path) -> None:
    from fasttts_cli.nets.codec import load_codec

    path, _ = _tiny_codec_file(tmp_path)
    state = safetensors_torch.load_file(path)
    del state["decoder.1.weight"]
    safetensors_torch.save_file(state, path)
    with pytest.raises(CheckpointKeyError, match=r"decoder\.1\.weight"):
        load_codec(path)


def test_campplus_sizes_from_tensors_and_strict_keys(tmp_path: Path) -> None:
    from fasttts_cli.nets.campplus import CAMPPlus, load_campplus

    ref = CAMPPlus(
        embedding_size=24, init_channels=32, growth=8, bottleneck=16, block_layers=(2, 3, 1)
    ).eval()
    _randomize(ref, seed=5)
    path = tmp_path / "campplus_cn_common.bin"
    torch.save(ref.state_dict(), path)
    model = load_campplus(path)
    fbank = torch.randn(1, 230, 80, generator=_gen(6))
    with torch.no_grad():
        assert torch.allclose(model(fbank), ref(fbank))
    assert model(fbank).shape == (1, 24)
    state = ref.state_dict()
    state["xvector.extra.weight"] = torch.zeros(1)
    torch.save(state, path)
    with pytest.raises(CheckpointKeyError, match=r"campplus_cn_common\.bin.*xvector\.extra\.weight"):
        load_campplus(path)
