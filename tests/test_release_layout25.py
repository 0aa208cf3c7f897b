"""IndexTTS-2.5 official-layout loading (delta §1.1): strict keys with listed known extras, errors naming
file and key, the config name and schema, version detection, and the tiny 2.5 checkpoint itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from fasttts_cli.build.tiny import ensure_tiny_checkpoint  # noqa: E402
from fasttts_cli.cli.commands import main  # noqa: E402
from fasttts_cli.errors import InputError, MissingDependencyError  # noqa: E402
from fasttts_cli.nets.checkpoint25 import load_checkpoint25  # noqa: E402
from fasttts_cli.nets.config import ConfigError  # noqa: E402
from fasttts_cli.nets.release_layout25 import CODEC_FILE, detect_model_version  # noqa: E402
from fasttts_cli.nets.tiktoken_ranks import N_SPECIAL, TOKENIZER_FILE  # noqa: E402
from fasttts_cli.nets.weights import CheckpointKeyError  # noqa: E402
from tests.parity import CACHE  # noqa: E402


@pytest.fixture(scope="module")
def tiny25() -> Path:
    return ensure_tiny_checkpoint(CACHE / "tiny25-ckpt-seed0", seed=0, model="indextts2.5")


@pytest.fixture
def copy25(tiny25: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt25"
    shutil.copytree(tiny25, dst)
    return dst


def _config(folder: Path) -> dict:
    return yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))


def test_tiny25_loads_strictly_with_sizes_from_config(tiny25: Path) -> None:
    m = load_checkpoint25(tiny25)
    g = _config(tiny25)["gpt"]
    assert not (tiny25 / "bpe.model").exists()
    assert not (tiny25 / "hf_cache" / "semantic_codec_model.safetensors").exists()
    keys = set(m.gpt.state_dict())
    assert {"spk_emb_proj.weight", "spk_emb_proj.bias", "lang_embedding.weight"} <= keys
    assert not any(k.startswith(("conditioning_encoder.", "perceiver_encoder.", "speed_emb.")) for k in keys)
    assert m.gpt.cfg.model_dim == g["model_dim"] and m.gpt.cfg.layers == g["layers"]
    assert m.gpt.lang_embedding.weight.shape == (107, g["model_dim"])
    assert m.gpt.spk_emb_proj.weight.shape[1] == _config(tiny25)["s2mel"]["style_encoder"]["dim"]
    assert m.gpt.text_embedding.weight.shape[0] == g["number_text_tokens"] + 1 >= m.n_ranks + N_SPECIAL
    assert m.gpt.mel_pos_embedding.emb.weight.shape[0] == g["max_mel_tokens"] + 3
    assert m.s2mel.gpt_layer is None and m.config.model == "indextts2.5" and m.config.bpe_model == ""
    assert m.config.semantic_codec.downsample_scale == 2
    assert m.codec.decoder[0].embed.weight.shape[1] == m.w2v_bert.mean.shape[0]
    assert m.emo_matrix.shape == (73, g["model_dim"]) and m.tokenizer.name == TOKENIZER_FILE
    assert m.random_weights
    assert sum(p.stat().st_size for p in tiny25.rglob("*") if p.is_file()) < 8_000_000


def test_known_extras_are_accepted_and_listed(tiny25: Path) -> None:
    ex = load_checkpoint25(tiny25).known_extras
    assert ex["gpt"] == ()
    assert len(ex["s2mel"]) == 6 and all(k.startswith("net/gpt_layer/") for k in ex["s2mel"])
    codec = ex["codec"]
    assert {"down.weight", "down.bias", "quantizer.quantizers.0.in_project.weight_v"} <= set(codec)
    assert any(k.startswith("encoder.0.convnext.") for k in codec) and "encoder.1.weight" in codec
    assert all(k.startswith(("down.", "encoder.", "quantizer.quantizers.0.in_project.")) for k in codec)


def test_extras_may_be_absent_and_gpt_aliases_are_listed(copy25: Path) -> None:
    path = copy25 / CODEC_FILE
    blob = torch.load(path, weights_only=True)
    blob["model"] = {k: v for k, v in blob["model"].items() if not k.startswith(("down.", "encoder."))}
    torch.save(blob, path)
    gpath = copy25 / "gpt.pth"
    sd = torch.load(gpath, weights_only=True)
    sd["inference_model.lm_head.0.weight"] = torch.zeros(2)
    torch.save(sd, gpath)
    ex = load_checkpoint25(copy25).known_extras
    assert ex["gpt"] == ("inference_model.lm_head.0.weight",)
    assert all(k.startswith("quantizer.quantizers.0.in_project.") for k in ex["codec"])


@pytest.mark.parametrize(
    ("file", "edit", "message"),
    [
        ("gpt.pth", lambda sd: sd.pop("lang_embedding.weight"), "missing key lang_embedding.weight"),
        ("gpt.pth", lambda sd: sd.pop("spk_emb_proj.bias"), "missing key spk_emb_proj.bias"),
        (
            "gpt.pth",
            lambda sd: sd.__setitem__("speed_emb.weight", torch.zeros(2, 4)),
            "unexpected key speed_emb.weight",
        ),
        (CODEC_FILE, lambda b: b["model"].pop("up.weight"), "missing key model/up.weight"),
        (
            CODEC_FILE,
            lambda b: b["model"].__setitem__("bogus.weight", torch.zeros(1)),
            "unexpected key model/bogus.weight",
        ),
        (
            "s2mel.pth",
            lambda b: b["net"].__setitem__("style_encoder", {"w": torch.zeros(1)}),
            "net/style_encoder",
        ),
        (
            "s2mel.pth",
            lambda b: b["net"]["length_regulator"].pop("content_in_proj.weight"),
            "content_in_proj",
        ),
    ],
)
def test_missing_or_extra_key_names_file_and_key(copy25: Path, file: str, edit, message: str) -> None:
    path = copy25 / file
    blob = torch.load(path, weights_only=True)
    edit(blob)
    torch.save(blob, path)
    with pytest.raises(CheckpointKeyError) as e:
        load_checkpoint25(copy25)
    assert str(path) in str(e.value) and message in str(e.value)


def test_misshaped_key_names_file_and_key(copy25: Path) -> None:
    path = copy25 / "gpt.pth"
    sd = torch.load(path, weights_only=True)
    sd["lang_embedding.weight"] = sd["lang_embedding.weight"][:, :-1].clone()
    torch.save(sd, path)
    with pytest.raises(CheckpointKeyError, match=r"lang_embedding\.weight has shape"):
        load_checkpoint25(copy25)


def test_config_names_and_schema(copy25: Path) -> None:
    cfg = _config(copy25)
    (copy25 / "config.yaml").rename(copy25 / "config_v2_5.yaml")
    assert load_checkpoint25(copy25).paths.config.name == "config_v2_5.yaml"
    # a config with the (unused) speaker conditioner and condition_type loads too
    cfg["gpt"]["condition_module"] = dict(cfg["gpt"]["emo_condition_module"])
    other = copy25 / "elsewhere.yaml"
    other.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert load_checkpoint25(copy25, config=other).gpt.cfg.campplus
    # EnhancedCodec takes exactly its eight keys; downsample_scale must be > 1
    for key, value, message in [
        ("vq_bins", 3, "unknown key semantic_codec.vq_bins"),
        ("downsample_scale", 1, "semantic_codec.downsample_scale"),
        ("num_quantizers", 2, "semantic_codec.num_quantizers"),
    ]:
        bad = json.loads(json.dumps(cfg))
        bad["semantic_codec"][key] = value
        other.write_text(yaml.safe_dump(bad), encoding="utf-8")
        with pytest.raises(ConfigError, match=message):
            load_checkpoint25(copy25, config=other)
    bad = json.loads(json.dumps(cfg))
    bad["gpt"]["spk_cond_mode"] = "campplus"  # the original passes it itself: a duplicate keyword
    other.write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown key gpt\.spk_cond_mode"):
        load_checkpoint25(copy25, config=other)


def test_text_table_must_hold_every_tokenizer_id(copy25: Path) -> None:
    cfg = _config(copy25)
    # rows = number_text_tokens + 1 must reach n_vocab = R + N_SPECIAL (the tiny one has one to spare)
    cfg["gpt"]["number_text_tokens"] -= 2
    (copy25 / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with pytest.raises(ConfigError, match="special tokens"):
        load_checkpoint25(copy25)


def test_missing_files_are_named_with_their_repository(copy25: Path) -> None:
    (copy25 / CODEC_FILE).unlink()
    (copy25 / TOKENIZER_FILE).unlink()
    shutil.rmtree(copy25 / "hf_cache" / "bigvgan")
    with pytest.raises(MissingDependencyError) as e:
        load_checkpoint25(copy25)
    msg = str(e.value)
    assert "4 model files missing" in msg  # bigvgan/ is two and "(from IndexTeam/IndexTTS-2.5)" in msg
    assert CODEC_FILE in msg and TOKENIZER_FILE in msg and "nvidia/bigvgan_v2_22khz_80band_256x" in msg


def test_detect_model_version(tiny25: Path, tmp_path: Path) -> None:
    v2 = ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0)
    assert detect_model_version(v2) == "indextts2"
    assert detect_model_version(tiny25) == "indextts2.5"
    hub = tmp_path / "hub"
    (hub / "models--IndexTeam--IndexTTS-2").mkdir(parents=True)
    assert detect_model_version(hub) == "indextts2"
    only_cfg = tmp_path / "only"
    only_cfg.mkdir()
    (only_cfg / "config_v2_5.yaml").write_text("gpt: {}\n", encoding="utf-8")
    assert detect_model_version(only_cfg) == "indextts2.5"
    (only_cfg / "bpe.model").write_bytes(b"x")
    with pytest.raises(InputError, match="both"):
        detect_model_version(only_cfg)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="neither"):
        detect_model_version(tmp_path / "empty")
    with pytest.raises(InputError, match="not found"):
        detect_model_version(tmp_path / "nope")


def test_cli_tiny_checkpoint_model_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def run(*args: str) -> tuple[int, dict]:
        with pytest.raises(SystemExit) as e:
            main(["tiny-checkpoint", *args, "--json"])
        out = capsys.readouterr().out
        return int(e.value.code), (json.loads(out) if out.strip() else {})

    code, r = run(str(tmp_path / "c"), "--model", "indextts2.5", "--seed", "3")
    assert code == 0 and r["model"] == "indextts2.5"
    assert detect_model_version(tmp_path / "c") == "indextts2.5"
    code, r = run(str(tmp_path / "d"), "--model", "indextts3")
    assert code == 2 and "indextts2.5" in r["error"] and not (tmp_path / "d").exists()
