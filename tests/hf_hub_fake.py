"""A Hugging Face hub cache and the five release repositories, made from the tiny checkpoint, offline.

`hub_add` writes one file the way huggingface_hub does (blobs/<sha256>, snapshots/<rev>/<file> a relative
symlink into blobs, refs/main naming the revision). `release_sources` maps each repository of the public
release to its files, taken from a tiny checkpoint in the official layout, plus files inference never
reads (README, the Qwen emotion model, other MaskGCT codecs...), so tests can tell what is fetched.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from fasttts_cli.nets.release_layout import repo_folder

REV = "0123456789abcdef0123456789abcdef01234567"

MAIN_FILES = (
    "config.yaml",
    "gpt.pth",
    "s2mel.pth",
    "bpe.model",
    "wav2vec2bert_stats.pt",
    "feat1.pt",
    "feat2.pt",
)


def hub_add(hub: Path, repo: str, filename: str, src: Path, rev: str = REV) -> Path:
    repo_dir = hub / repo_folder(repo)
    data = src.read_bytes()
    blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
    if not blob.exists():
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
    link = repo_dir / "snapshots" / rev / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(rev)
    return link


def release_sources(tiny: Path, extras: Path) -> dict[str, dict[str, Path]]:
    """repo -> {filename in the repo: local file}; `extras` receives the files inference never reads."""
    extras.mkdir(parents=True, exist_ok=True)

    def extra(name: str, text: str) -> Path:
        p = extras / name.replace("/", "__")
        p.write_text(text)
        return p

    hf = tiny / "hf_cache"
    return {
        "IndexTeam/IndexTTS-2": {
            **{n: tiny / n for n in MAIN_FILES},
            "README.md": extra("main-README.md", "# IndexTTS-2\n"),
            "qwen0.6bemo4-merge/config.json": extra("qwen-config.json", "{}"),
            "qwen0.6bemo4-merge/model.safetensors": extra("qwen-model", "not a model"),
        },
        "facebook/w2v-bert-2.0": {
            "config.json": hf / "w2v-bert-2.0" / "config.json",
            "model.safetensors": hf / "w2v-bert-2.0" / "model.safetensors",
            "preprocessor_config.json": hf / "w2v-bert-2.0" / "preprocessor_config.json",
            "README.md": extra("w2v-README.md", "# w2v-BERT 2.0\n"),
        },
        "amphion/MaskGCT": {
            "semantic_codec/model.safetensors": hf / "semantic_codec_model.safetensors",
            "acoustic_codec/model.safetensors": extra("acoustic", "other codec"),
            "t2s_model/model.safetensors": extra("t2s", "other model"),
        },
        "funasr/campplus": {
            "campplus_cn_common.bin": hf / "campplus_cn_common.bin",
            "README.md": extra("campplus-README.md", "# CAM++\n"),
        },
        "nvidia/bigvgan_v2_22khz_80band_256x": {
            "config.json": hf / "bigvgan" / "config.json",
            "bigvgan_generator.pt": hf / "bigvgan" / "bigvgan_generator.pt",
            "bigvgan_discriminator_optimizer.pt": extra("disc", "not needed"),
        },
    }


def write_hub(hub: Path, sources: dict[str, dict[str, Path]], skip: tuple[tuple[str, str], ...] = ()) -> Path:
    """Every file of `sources` into `hub`, except the (repo, filename) pairs in `skip`."""
    for repo, files in sources.items():
        for name, src in files.items():
            if (repo, name) not in skip:
                hub_add(hub, repo, name, src)
    return hub
