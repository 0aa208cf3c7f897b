"""`fasttts build` on a damaged checkpoint (issue 29): every checkpoint file is read through one guard, so a
truncated or garbled file of any kind (safetensors, torch .pth/.pt/.bin, JSON, YAML, the tokenizer) is exit
2 naming it, never an internal error."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_checkpoint_dir)
from tests.faults import run_cli as run


def _truncate(p: Path) -> None:
    with p.open("r+b") as f:
        f.truncate(os.path.getsize(p) // 2)


def _garble(p: Path) -> None:
    p.write_bytes(b"[1, 2]" if p.suffix in (".json", ".yaml") else b"\x00garbage" * 10)


FILES = [
    "hf_cache/semantic_codec_model.safetensors",
    "hf_cache/w2v-bert-2.0/model.safetensors",
    "hf_cache/w2v-bert-2.0/config.json",
    "hf_cache/bigvgan/config.json",
    "hf_cache/bigvgan/bigvgan_generator.pt",
    "hf_cache/campplus_cn_common.bin",
    "gpt.pth",
    "s2mel.pth",
    "feat1.pt",
    "wav2vec2bert_stats.pt",
    "config.yaml",
]


@pytest.mark.parametrize("damage", [_truncate, _garble], ids=["truncated", "garbled"])
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_checkpoint_file_is_an_input_error_naming_it(
    tiny_checkpoint_dir: Path, tmp_path: Path, name: str, damage: Callable[[Path], None]
) -> None:
    from fasttts_cli.errors import InputError
    from fasttts_cli.nets.checkpoint import load_checkpoint

    ckpt = shutil.copytree(tiny_checkpoint_dir, tmp_path / "ckpt")
    damage(ckpt / name)
    with pytest.raises(InputError) as e:
        load_checkpoint(ckpt)
    assert e.value.exit_code == 2 and name.rsplit("/", 1)[-1] in e.value.message, e.value.message


@pytest.mark.parametrize(
    ("name", "damage"),
    [("hf_cache/semantic_codec_model.safetensors", _truncate), ("bpe.model", _garble)],
    ids=["codec", "tokenizer"],
)
def test_build_is_exit_2_naming_the_damaged_file(
    tiny_checkpoint_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    damage: Callable[[Path], None],
) -> None:
    ckpt = shutil.copytree(tiny_checkpoint_dir, tmp_path / "ckpt")
    damage(ckpt / name)
    code, out, err = run(capsys, "build", "--checkpoint", ckpt, "--out", tmp_path / "engine", "--json")
    r = json.loads(out)
    assert code == 2 and r["exit_code"] == 2 and str(ckpt / name) in r["error"], r
    assert "internal error" not in r["error"] and "Traceback" not in err
    assert not (tmp_path / "engine").exists()


@pytest.mark.parametrize("key", ["s2mel.length_regulator.channels", "gpt.condition_module.attention_heads"])
def test_a_setting_no_module_can_take_names_the_config(
    tiny_checkpoint_dir: Path, tmp_path: Path, key: str
) -> None:
    import yaml

    from fasttts_cli.errors import InputError
    from fasttts_cli.nets.checkpoint import load_checkpoint

    ckpt = shutil.copytree(tiny_checkpoint_dir, tmp_path / "ckpt")
    cfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))
    *parents, last = key.split(".")
    node = cfg
    for k in parents:
        node = node[k]
    node[last] = -1
    (ckpt / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_checkpoint(ckpt)
    assert e.value.message.startswith(f"{ckpt / 'config.yaml'}: the model cannot be built"), e.value.message
