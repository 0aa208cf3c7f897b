"""Official-layout checkpoint loading: strict keys, clear errors, overrides, digest; the tiny generator."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from fasttts_cli.build.tiny import TINY_CONFIG, ensure_tiny_checkpoint, write_tiny_checkpoint  # noqa: E402
from fasttts_cli.errors import InputError, MissingDependencyError  # noqa: E402
from fasttts_cli.nets.checkpoint import (  # noqa: E402
    RANDOM_KEY,
    CheckpointPaths,
    checkpoint_digest,
    load_checkpoint,
)
from fasttts_cli.nets.config import ConfigError, load_config  # noqa: E402
from tests.parity import CACHE, ParityCase  # noqa: E402


@pytest.fixture(autouse=True)
def _empty_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # auxiliary models missing from hf_cache/ are looked for in the user's hub: keep that one empty
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))


@pytest.fixture(scope="module")
def tiny() -> Path:
    return ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0)


@pytest.fixture
def tiny_copy(tiny: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny, dst)
    return dst


def test_tiny_loads_strictly_with_sizes_from_config(tiny: Path) -> None:
    m = load_checkpoint(tiny)
    g = TINY_CONFIG["gpt"]
    assert m.gpt.cfg.model_dim == g["model_dim"] and m.gpt.cfg.layers == g["layers"]
    assert m.gpt.mel_pos_embedding.emb.weight.shape[0] == g["max_mel_tokens"] + 3
    assert m.gpt.text_embedding.weight.shape[0] == g["number_text_tokens"] + 1
    assert m.w2v_bert.mean.shape[0] == TINY_CONFIG["semantic_codec"]["hidden_size"]
    assert m.spk_matrix.shape == (73, TINY_CONFIG["s2mel"]["style_encoder"]["dim"])
    assert m.emo_matrix.shape == (73, g["model_dim"])
    assert m.bpe_model.is_file()
    assert m.random_weights  # config.yaml says so: every engine built from it will too
    # the tiny checkpoint is small and its weights are not trivial
    total = sum(p.stat().st_size for p in tiny.rglob("*") if p.is_file())
    assert total < 8_000_000
    ln = m.gpt.final_norm.weight.detach()
    assert not torch.allclose(ln, torch.ones_like(ln)) and m.gpt.final_norm.bias.abs().sum() > 0


def test_only_marked_checkpoints_have_random_weights(tiny_copy: Path) -> None:
    cfg_path = tiny_copy / "config.yaml"
    data = yaml.safe_load(cfg_path.read_text())
    assert data.pop(RANDOM_KEY) is True
    cfg_path.write_text(yaml.safe_dump(data))  # a real checkpoint's config has no such key
    assert load_checkpoint(tiny_copy).random_weights is False


def test_tiny_is_deterministic_per_seed(tiny: Path, tmp_path: Path) -> None:
    again = write_tiny_checkpoint(tmp_path / "a", seed=0)
    other = write_tiny_checkpoint(tmp_path / "b", seed=1)
    d0 = checkpoint_digest(CheckpointPaths(tiny).resolve(load_config(tiny / "config.yaml")))
    d1 = checkpoint_digest(CheckpointPaths(again).resolve(load_config(again / "config.yaml")))
    d2 = checkpoint_digest(CheckpointPaths(other).resolve(load_config(other / "config.yaml")))
    assert d0 == d1 != d2


def test_missing_key_names_file_and_key(tiny_copy: Path) -> None:
    path = tiny_copy / "gpt.pth"
    sd = torch.load(path, weights_only=True)
    del sd["mel_head.bias"]
    torch.save(sd, path)
    with pytest.raises(InputError) as e:
        load_checkpoint(tiny_copy)
    assert str(path) in str(e.value) and "missing key mel_head.bias" in str(e.value)


def test_extra_key_names_file_and_key(tiny_copy: Path) -> None:
    path = tiny_copy / "s2mel.pth"
    blob = torch.load(path, weights_only=True)
    blob["net"]["cfm"]["estimator.bogus.weight"] = torch.zeros(3)
    torch.save(blob, path)
    with pytest.raises(InputError) as e:
        load_checkpoint(tiny_copy)
    assert str(path) in str(e.value) and "unexpected key net/cfm/estimator.bogus.weight" in str(e.value)


def test_ignored_keys_are_ignored(tiny_copy: Path) -> None:
    """Spec §3.1: a gpt.pth saved after post_init carries `inference_model.*` / `gpt.wte.*` aliases."""
    path = tiny_copy / "gpt.pth"
    sd = torch.load(path, weights_only=True)
    sd["gpt.wte.weight"] = sd["mel_embedding.weight"].clone()
    sd["inference_model.lm_head.1.weight"] = sd["mel_head.weight"].clone()
    torch.save({"model": sd}, path)  # and the `model` wrapper
    assert load_checkpoint(tiny_copy).gpt.mel_head.weight.shape[0] == 8194


def test_misshaped_tensor_names_file_and_key(tiny_copy: Path) -> None:
    path = tiny_copy / "hf_cache" / "campplus_cn_common.bin"
    sd = torch.load(path, weights_only=True)
    sd["xvector.dense.linear.weight"] = torch.zeros(5, 3, 1)
    torch.save(sd, path)
    with pytest.raises(InputError) as e:
        load_checkpoint(tiny_copy)
    assert str(path) in str(e.value) and "xvector.dense" in str(e.value)


@pytest.mark.parametrize(
    "rel",
    ["feat1.pt", "bpe.model", "hf_cache/bigvgan/bigvgan_generator.pt", "hf_cache/w2v-bert-2.0/config.json"],
)
def test_missing_file_names_it(tiny_copy: Path, rel: str) -> None:
    (tiny_copy / rel).unlink()
    with pytest.raises(MissingDependencyError) as e:
        load_checkpoint(tiny_copy)
    assert str(tiny_copy / rel) in str(e.value) and "1 model file missing" in str(e.value)
    assert "fasttts download" in str(e.value)


def test_config_errors_name_file_and_key(tiny_copy: Path) -> None:
    cfg_path = tiny_copy / "config.yaml"
    base = yaml.safe_load(cfg_path.read_text())

    def broken(edit) -> str:
        data = yaml.safe_load(yaml.safe_dump(base))
        edit(data)
        cfg_path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError) as e:
            load_checkpoint(tiny_copy)
        assert str(cfg_path) in str(e.value)
        return str(e.value)

    assert "missing key gpt.layers" in broken(lambda d: d["gpt"].pop("layers"))
    assert "unknown key gpt.bogus" in broken(lambda d: d["gpt"].__setitem__("bogus", 1))
    assert "s2mel.DiT.depth" in broken(lambda d: d["s2mel"]["DiT"].__setitem__("depth", "three"))
    assert "emo_num" in broken(lambda d: d.__setitem__("emo_num", [1, 2]))
    assert "missing key s2mel_checkpoint" in broken(lambda d: d.pop("s2mel_checkpoint"))


def test_config_size_mismatch_with_tensors(tiny_copy: Path) -> None:
    cfg_path = tiny_copy / "config.yaml"
    data = yaml.safe_load(cfg_path.read_text())
    data["gpt"]["max_mel_tokens"] += 5
    cfg_path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as e:
        load_checkpoint(tiny_copy)
    assert "gpt.pth" in str(e.value) and "mel_pos_embedding" in str(e.value)


def test_auxiliary_overrides(tiny_copy: Path, tmp_path: Path) -> None:
    aux = tmp_path / "aux"
    shutil.move(tiny_copy / "hf_cache", aux)
    with pytest.raises(MissingDependencyError) as e:
        load_checkpoint(tiny_copy)
    assert "--w2v-bert" in str(e.value) and "hf_cache" in str(e.value)
    paths = CheckpointPaths(
        tiny_copy,
        w2v_bert=aux / "w2v-bert-2.0",
        codec=aux / "semantic_codec_model.safetensors",
        campplus=aux / "campplus_cn_common.bin",
        bigvgan=aux / "bigvgan",
    )
    m = load_checkpoint(paths)
    assert m.paths.codec == aux / "semantic_codec_model.safetensors"
    with pytest.raises(MissingDependencyError) as e:
        load_checkpoint(
            CheckpointPaths(tiny_copy, w2v_bert=aux / "w2v-bert-2.0", codec=aux / "nope.safetensors")
        )
    assert "nope.safetensors (semantic_codec/model.safetensors from amphion/MaskGCT)" in str(e.value)


def test_digest_changes_with_any_file(tiny_copy: Path) -> None:
    rp = CheckpointPaths(tiny_copy).resolve(load_config(tiny_copy / "config.yaml"))
    before = checkpoint_digest(rp)
    assert before == checkpoint_digest(rp)
    t = torch.load(tiny_copy / "feat2.pt", weights_only=True)
    t[0, 0] += 1
    torch.save(t, tiny_copy / "feat2.pt")
    assert checkpoint_digest(rp) != before


def test_bad_emotion_matrix_shape(tiny_copy: Path) -> None:
    torch.save(torch.zeros(72, 32), tiny_copy / "feat2.pt")
    with pytest.raises(InputError) as e:
        load_checkpoint(tiny_copy)
    assert "feat2.pt" in str(e.value) and "(73, 32)" in str(e.value)


@pytest.mark.parity
def test_parity_checkpoint_loads_strictly(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    m = load_checkpoint(parity_checkpoint)
    # every size from the vector set's own config, so a vector set of another size checks the same
    g = yaml.safe_load((parity_case.spec / "config.yaml").read_text(encoding="utf-8"))["gpt"]
    c = m.gpt.cfg
    assert (c.model_dim, c.layers, c.heads) == (g["model_dim"], g["layers"], g["heads"])
    assert m.w2v_bert.model.config.hidden_size == 1024  # the original hard-codes this width
    assert m.spk_matrix.shape == (73, 192) and m.emo_matrix.shape == (73, g["model_dim"])
