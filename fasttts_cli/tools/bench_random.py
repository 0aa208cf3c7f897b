"""`fasttts bench --random-weights`: a FULL-SIZE IndexTTS-2 checkpoint with random weights in the official
layout (config.yaml of the release, every module at its real width) and its engine, built in a child
process whose time and peak memory are reported too. `--model indextts2.5` writes the 2.5 layout at
tiny_config.FULL25 instead (the sizes chosen for 2.5, whose release sizes are unknown)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fasttts_cli.tools.bench_common import peak_rss_mb, timed


def full_config() -> dict[str, Any]:
    """The release's config.yaml (spec §1.2)."""
    from fasttts_cli.build.tiny import TINY_CONFIG
    from fasttts_cli.nets.random_modules import FULL_GPT

    cfg = json.loads(json.dumps(TINY_CONFIG))  # the schema; every size below is the release's
    cfg["gpt"] = {**cfg["gpt"], **json.loads(json.dumps(FULL_GPT))}
    cfg["semantic_codec"].update(
        hidden_size=1024, vocos_dim=384, vocos_intermediate_dim=2048, vocos_num_layers=12
    )
    s2 = cfg["s2mel"]
    s2["style_encoder"]["dim"] = 192
    s2["length_regulator"].update(
        channels=512, in_channels=1024, content_codebook_size=2048, sampling_ratios=[1, 1, 1, 1]
    )
    s2["DiT"].update(hidden_dim=512, num_heads=8, depth=13, content_dim=512, content_codebook_size=1024)
    s2["wavenet"].update(hidden_dim=512, num_layers=8)
    return cfg


BIGVGAN_FULL_JSON: dict[str, Any] = {
    "resblock": "1",
    "num_mels": 80,
    "upsample_rates": [4, 4, 2, 2, 2, 2],
    "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
    "upsample_initial_channel": 1536,
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "activation": "snakebeta",
    "snake_logscale": True,
    "use_tanh_at_final": False,
    "use_bias_at_final": False,
    "sampling_rate": 22050,
    "hop_size": 256,
    "n_fft": 1024,
    "win_size": 1024,
    "fmin": 0,
    "fmax": None,
}


def write_random_checkpoint(out: Path, seed: int = 0) -> Path:
    """Full-size IndexTTS-2 checkpoint with random weights in the official layout (about 7 GB: w2v-BERT
    with all 24 layers as released). Modules are built, saved and freed one at a time to bound memory."""
    import gc

    import torch
    import yaml
    from safetensors.torch import save_file
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    from fasttts_cli.build import tiny
    from fasttts_cli.nets.campplus import CAMPPlus
    from fasttts_cli.nets.codec import SemanticCodec
    from fasttts_cli.nets.config import SemanticCodecConfig
    from fasttts_cli.nets.random_modules import random_bigvgan, random_s2mel, random_unified_voice

    def state(m: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous() for k, v in m.state_dict().items()}

    out.mkdir(parents=True, exist_ok=True)
    from fasttts_cli.nets.checkpoint import RANDOM_KEY

    cfg = {**full_config(), RANDOM_KEY: True}  # engines built from it say they have random weights
    (out / "config.yaml").write_text(
        "# RANDOM full-size IndexTTS-2 checkpoint (fasttts bench --random-weights)\n"
        + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )
    (out / "bpe.model").write_bytes(tiny.train_bpe())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m: Any = random_unified_voice("full", seed)
        torch.save(state(m), out / "gpt.pth")
        del m
        gc.collect()
        s2 = random_s2mel("full", seed + 1)
        torch.save({"net": {k: dict(v) for k, v in s2.official_state_dict().items()}}, out / "s2mel.pth")
        del s2
        n_proto = sum(cfg["emo_num"])
        torch.save(0.5 * torch.randn(n_proto, 192, generator=g), out / "feat1.pt")
        torch.save(0.02 * torch.randn(n_proto, 1280, generator=g), out / "feat2.pt")
        torch.save(
            {
                "mean": 0.1 * torch.randn(1024, generator=g),
                "var": 0.5 + 0.5 * torch.randn(1024, generator=g).abs(),
            },
            out / "wav2vec2bert_stats.pt",
        )
        hf = out / "hf_cache"
        w2v_dir = hf / "w2v-bert-2.0"
        w2v_dir.mkdir(parents=True, exist_ok=True)
        wcfg = Wav2Vec2BertConfig(add_adapter=False, hidden_dropout=0.0, attention_dropout=0.0)
        w2v = Wav2Vec2BertModel(wcfg)
        tiny._randomize(w2v, g)
        d = wcfg.to_dict()
        d["architectures"] = ["Wav2Vec2BertModel"]
        (w2v_dir / "config.json").write_text(json.dumps(d, indent=2, sort_keys=True), encoding="utf-8")
        (w2v_dir / "preprocessor_config.json").write_text(
            json.dumps(tiny.PREPROCESSOR_CONFIG), encoding="utf-8"
        )
        save_file(state(w2v), str(w2v_dir / "model.safetensors"), metadata={"format": "pt"})
        del w2v
        gc.collect()
        codec = SemanticCodec(SemanticCodecConfig(**cfg["semantic_codec"]))
        tiny._randomize(codec, g)
        save_file(state(codec), str(hf / "semantic_codec_model.safetensors"), metadata={"format": "pt"})
        camp = CAMPPlus()
        tiny._randomize(camp, g)
        torch.save(state(camp), hf / "campplus_cn_common.bin")
        (hf / "bigvgan").mkdir(exist_ok=True)
        (hf / "bigvgan" / "config.json").write_text(json.dumps(BIGVGAN_FULL_JSON, indent=2), encoding="utf-8")
        bv = random_bigvgan("full", seed + 2)
        torch.save({"generator": state(bv)}, hf / "bigvgan" / "bigvgan_generator.pt")
    return out


MODELS = ("indextts2", "indextts2.5")


def write_random_checkpoint_for(model: str, out: Path, seed: int = 0) -> Path:
    """The full-size random checkpoint of `model` (one of MODELS)."""
    if model == "indextts2":
        return write_random_checkpoint(out, seed)
    if model == "indextts2.5":
        from fasttts_cli.build.tiny import FULL_SIZES, write_tiny_checkpoint25

        return write_tiny_checkpoint25(out, seed, FULL_SIZES[model])
    raise ValueError(f"no full-size random checkpoint for model {model!r} (known: {', '.join(MODELS)})")


def build_random_engine(work: Path, preset: str, seed: int = 0, model: str = "indextts2") -> dict[str, Any]:
    """Checkpoint + engine in `work`, in this process; returns times and peak RSS."""
    import torch

    from fasttts_cli.build.export import build_engine

    torch.set_grad_enabled(False)
    t_ckpt, ckpt = timed(lambda: write_random_checkpoint_for(model, work / "checkpoint", seed))
    size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    t_build, eng = timed(lambda: build_engine(ckpt, preset, work / "engine", overwrite=True))
    esize = sum(p.stat().st_size for p in eng.rglob("*") if p.is_file())
    info = {
        "model": model,
        "checkpoint": str(ckpt),
        "engine": str(eng),
        "checkpoint_gb": round(size / 1e9, 2),
        "engine_gb": round(esize / 1e9, 2),
        "write_checkpoint_s": round(t_ckpt, 1),
        "load_and_export_s": round(t_build, 1),
        "peak_rss_mb": round(peak_rss_mb()),
    }
    (work / "build.json").write_text(json.dumps(info), encoding="utf-8")
    return info


def build_in_child(work: Path, preset: str, seed: int, model: str = "indextts2") -> dict[str, Any]:
    """The build runs in a child process so its memory does not count in the bench's own peak RSS."""
    work.mkdir(parents=True, exist_ok=True)
    code = (
        "import json, sys; from pathlib import Path; "
        "from fasttts_cli.tools.bench_random import build_random_engine; a = sys.argv; "
        "print(json.dumps(build_random_engine(Path(a[1]), a[2], int(a[3]), a[4])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(work), preset, str(seed), model],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"building the random engine failed:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
