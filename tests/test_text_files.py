"""The settings-file readers (preset TOML, config.yaml, BigVGAN's config.json) word an unreadable file
and a syntax error the same way, as an InputError naming the file (spec/text_files.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fasttts_cli.errors import InputError
from fasttts_cli.nets.config import ConfigError, load_config
from fasttts_cli.spec.presets import parse_preset


def _bigvgan(path: Path) -> Any:
    from fasttts_cli.nets.bigvgan import load_bigvgan

    return load_bigvgan(path.parent)


READERS: dict[str, tuple[str, str, Callable[[Path], Any], type[InputError]]] = {
    "preset": ("p.toml", 'name = "x\n', parse_preset, InputError),
    "config": ("config.yaml", "gpt: [1, 2\n", load_config, ConfigError),
    "bigvgan": ("config.json", '{"upsample_rates": [4,', _bigvgan, InputError),
}
SYNTAX = {"preset": "TOML", "config": "YAML", "bigvgan": "JSON"}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_bad_syntax_names_the_file_and_format(tmp_path: Path, reader: str) -> None:
    name, text, read, error = READERS[reader]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(error, match=f"not valid {SYNTAX[reader]}") as ei:
        read(path)
    assert str(path) in str(ei.value)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_text_that_is_not_utf8_cannot_be_read(tmp_path: Path, reader: str) -> None:
    name, _, read, error = READERS[reader]
    path = tmp_path / name
    path.write_bytes(b"name = \xff\xfe\n")
    with pytest.raises(error, match="cannot read: 'utf-8' codec") as ei:
        read(path)
    assert str(path) in str(ei.value)
