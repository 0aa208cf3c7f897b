"""Load an IndexTTS-2.5 checkpoint folder in the official layout (release_layout25) into our modules.

Every key is checked strictly except each file's known extras, which are accepted and listed in
`IndexTTS25Modules.known_extras` (file label -> keys):
- gpt.pth: the v2 rules (`inference_model.*`, `gpt.wte.*`, `gpt.wpe.*`, GPT-2's causal-mask buffers);
- s2mel.pth: `net/gpt_layer/*` (the released file holds it, 2.5 builds no gpt_layer);
- codec.pth: the encoder side (`down.*`, `encoder.*`, `quantizer.quantizers.0.in_project.*`).
Every size comes from config.yaml and the tensors; sizes the original hard-codes (the style width 192 of
`spk_emb_proj`, the 107 language rows, the 1024-wide emotion perceiver) are read from the tensors. Errors
name the file and the key (CheckpointKeyError, ConfigError, InputError as the v2 loader raises them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fasttts_cli.errors import InputError
from fasttts_cli.nets.checkpoint import (
    ModelModules,
    auxiliary_files,
    missing_files_error,
    read_matrix,
    read_w2v_stats,
)
from fasttts_cli.nets.config import ConfigError, IndexTTS2Config, load_config
from fasttts_cli.nets.release_layout25 import (
    AUX_MODELS25,
    CODEC_FILE,
    MAIN_REPO25,
    MODEL_V25,
    TOKENIZER_FILE,
    find_config25,
)
from fasttts_cli.nets.tiktoken_ranks import N_SPECIAL, read_tiktoken

_HINT = (
    f"an IndexTTS-2.5 checkpoint folder holds the files of {MAIN_REPO25} and hf_cache/ with "
    "w2v-bert-2.0/, campplus_cn_common.bin and bigvgan/ (`fasttts tiny-checkpoint --model indextts2.5` "
    "writes a random one)"
)


@dataclass(frozen=True)
class ResolvedPaths25:
    config: Path
    gpt: Path
    s2mel: Path
    codec: Path
    tokenizer: Path
    w2v_stat: Path
    spk_matrix: Path
    emo_matrix: Path
    w2v_bert: Path
    campplus: Path
    bigvgan: Path

    @classmethod
    def resolve(cls, root: Path, config: Path, cfg: IndexTTS2Config) -> ResolvedPaths25:
        hf = root / "hf_cache"
        return cls(
            config=config,
            gpt=root / cfg.gpt_checkpoint,
            s2mel=root / cfg.s2mel_checkpoint,
            codec=root / CODEC_FILE,
            tokenizer=root / TOKENIZER_FILE,
            w2v_stat=root / cfg.w2v_stat,
            spk_matrix=root / cfg.spk_matrix,
            emo_matrix=root / cfg.emo_matrix,
            **{m.key: hf / m.official for m in AUX_MODELS25},
        )

    def files(self) -> Iterator[tuple[str, Path]]:
        """(label, path) of every file the model reads, in a fixed order (for the digest)."""
        for name in ("config", "gpt", "s2mel", "codec", "tokenizer", "w2v_stat", "spk_matrix", "emo_matrix"):
            yield name, getattr(self, name)
        yield from auxiliary_files({m.key: getattr(self, m.key) for m in AUX_MODELS25}, AUX_MODELS25)

    def check_exist(self) -> None:
        missing = [(label, p) for label, p in self.files() if not p.is_file()]
        if missing:
            raise missing_files_error(missing, MAIN_REPO25, _HINT)


@dataclass
class IndexTTS25Modules(ModelModules):
    """IndexTTS-2.5's modules (see ModelModules), with its tokenizer's size and the extras it skipped."""

    n_ranks: int = 0  # R: the tokenizer's ranks; its ids run up to R + N_SPECIAL - 1
    known_extras: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def tokenizer(self) -> Path:
        return self.paths.tokenizer


def _agree(path: Path, what: str, pairs: dict[str, int]) -> None:
    """Every value in `pairs` (source -> size) equal, else InputError listing them."""
    if len(set(pairs.values())) > 1:
        listed = ", ".join(f"{k} {v}" for k, v in pairs.items())
        raise InputError(path, f"{what} disagree: {listed}")


def load_checkpoint25(root: Path | str, config: Path | str | None = None) -> IndexTTS25Modules:
    """Load every module of an official-layout 2.5 folder (eval mode, fp32). `config` overrides the
    config file (else config.yaml, config_v2_5.yaml or configs/config_v2_5.yaml, the first present)."""
    import torch

    from fasttts_cli.nets.bigvgan import load_bigvgan
    from fasttts_cli.nets.campplus import load_campplus
    from fasttts_cli.nets.codec_enhanced import load_enhanced_codec
    from fasttts_cli.nets.s2mel25 import load_s2mel25
    from fasttts_cli.nets.unified_voice25 import load_unified_voice25
    from fasttts_cli.nets.w2v_bert import load_w2v_bert
    from fasttts_cli.nets.weights import built_from

    root = Path(root).expanduser()
    if not root.is_dir():
        raise InputError(root, "checkpoint directory not found")
    cfg_path = Path(config) if config else find_config25(root)
    if not cfg_path.is_file():
        missing = [("config", cfg_path)]
        hf = root / "hf_cache"
        aux = {m.key: hf / m.official for m in AUX_MODELS25}
        missing += [(lb, p) for lb, p in auxiliary_files(aux, AUX_MODELS25) if not p.is_file()]
        raise missing_files_error(missing, MAIN_REPO25, _HINT)
    cfg = load_config(cfg_path, MODEL_V25)
    rp = ResolvedPaths25.resolve(root, cfg_path, cfg)
    rp.check_exist()
    n_ranks = len(read_tiktoken(rp.tokenizer))
    text_rows = cfg.gpt.number_text_tokens * cfg.gpt.types + 1
    if text_rows < n_ranks + N_SPECIAL:
        raise ConfigError(
            cfg_path,
            f"gpt.number_text_tokens * gpt.types + 1 = {text_rows} text rows, but {TOKENIZER_FILE} gives ids "
            f"up to {n_ranks + N_SPECIAL - 1} ({n_ranks} ranks + {N_SPECIAL} special tokens)",
        )
    extras: dict[str, tuple[str, ...]] = {}
    with torch.no_grad(), built_from(cfg_path):
        w2v = load_w2v_bert(rp.w2v_bert, rp.w2v_stat)
        width = int(w2v.mean.numel())
        mean, var = read_w2v_stats(rp.w2v_stat, width)
        gpt, extras["gpt"] = load_unified_voice25(
            rp.gpt, cfg.raw["gpt"], cond_input_size=width, config_path=cfg_path
        )
        s2mel, extras["s2mel"] = load_s2mel25(rp.s2mel, cfg.raw["s2mel"])
        codec, extras["codec"] = load_enhanced_codec(rp.codec, cfg.semantic_codec)
        campplus = load_campplus(rp.campplus)
        bigvgan = load_bigvgan(rp.bigvgan)
    _agree(
        cfg_path,
        "content widths",
        {
            "w2v-BERT": width,
            "semantic_codec.hidden_size": cfg.semantic_codec.hidden_size,
            "s2mel.length_regulator.in_channels": cfg.s2mel.length_regulator.in_channels,
        },
    )
    style = int(campplus.xvector.dense.linear.weight.shape[0])
    _agree(
        cfg_path,
        "style widths",
        {
            "CAMPPlus": style,
            "s2mel.style_encoder.dim": cfg.s2mel.style_dim,
            "gpt spk_emb_proj": gpt.cfg.style_dim,
        },
    )
    lowest = min(cfg.gpt.start_mel_token, cfg.gpt.stop_mel_token)
    if cfg.semantic_codec.codebook_size < lowest:
        raise ConfigError(
            cfg_path,
            f"semantic_codec.codebook_size {cfg.semantic_codec.codebook_size} cannot decode codes up to "
            f"{lowest - 1} (gpt start/stop mel tokens {cfg.gpt.start_mel_token}/{cfg.gpt.stop_mel_token})",
        )
    n_proto = sum(cfg.emo_num)
    return IndexTTS25Modules(
        config=cfg,
        paths=rp,
        gpt=gpt,
        s2mel=s2mel,
        codec=codec,
        w2v_bert=w2v,
        campplus=campplus,
        bigvgan=bigvgan,
        w2v_mean=mean,
        w2v_var=var,
        spk_matrix=read_matrix(rp.spk_matrix, n_proto, style, "spk_matrix (feat1)"),
        emo_matrix=read_matrix(rp.emo_matrix, n_proto, cfg.gpt.model_dim, "emo_matrix (feat2)"),
        n_ranks=n_ranks,
        known_extras=extras,
    )
