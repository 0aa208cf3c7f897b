"""Load an IndexTTS-2 checkpoint directory in the official layout (spec §1.1) into our PyTorch modules.

    config.yaml  gpt.pth  s2mel.pth  wav2vec2bert_stats.pt  feat1.pt  feat2.pt  bpe.model
    hf_cache/w2v-bert-2.0/{config.json, model.safetensors}  hf_cache/semantic_codec_model.safetensors
    hf_cache/campplus_cn_common.bin  hf_cache/bigvgan/{config.json, bigvgan_generator.pt}

Each auxiliary model may live elsewhere (`CheckpointPaths` overrides), and `locate_checkpoint` finds the
files in the other layouts of release_layout.py (a release folder, the Hugging Face cache). Missing files
are reported all at once, each with the repository it comes from. Every key is checked strictly by the
module loaders (errors name the file and the key); this module composes them, checks the small tensors
(stats, emotion matrices) against the config, and computes the checkpoint digest recorded in an engine's
manifest. A random-weight checkpoint (`fasttts tiny-checkpoint`) says so in config.yaml (RANDOM_KEY).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fasttts_cli.errors import InputError, MissingDependencyError
from fasttts_cli.nets.config import IndexTTS2Config, load_config
from fasttts_cli.nets.release_layout import (
    AUX_BY_KEY,
    AUX_MODELS,
    MAIN_REPO,
    AuxModel,
    find_auxiliary,
    find_layout,
)
from fasttts_cli.spec.engine_folder import file_sha256

# Top-level config.yaml key written by `fasttts tiny-checkpoint`: the weights are random. The official
# loader ignores unknown top-level keys, so the file stays a valid IndexTTS-2 config.
RANDOM_KEY = "fasttts_random_weights"


@dataclass(frozen=True)
class CheckpointPaths:
    """Where each file of a checkpoint is. `root` is the official directory; overrides win."""

    root: Path
    config: Path | None = None
    w2v_bert: Path | None = None  # folder with config.json + model.safetensors
    codec: Path | None = None  # semantic_codec_model.safetensors
    campplus: Path | None = None  # campplus_cn_common.bin
    bigvgan: Path | None = None  # folder with config.json + bigvgan_generator.pt

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config_path(self) -> Path:
        return Path(self.config) if self.config else self.root / "config.yaml"

    def auxiliary(self) -> dict[str, Path]:
        """The four auxiliary models: the overrides, else their official places under hf_cache/."""
        hf = self.root / "hf_cache"
        return {m.key: Path(getattr(self, m.key) or hf / m.official) for m in AUX_MODELS}

    def resolve(self, cfg: IndexTTS2Config) -> ResolvedPaths:
        r, aux = self.root, self.auxiliary()
        return ResolvedPaths(
            config=self.config_path,
            gpt=r / cfg.gpt_checkpoint,
            s2mel=r / cfg.s2mel_checkpoint,
            w2v_stat=r / cfg.w2v_stat,
            spk_matrix=r / cfg.spk_matrix,
            emo_matrix=r / cfg.emo_matrix,
            bpe_model=r / cfg.bpe_model,
            **aux,
        )


@dataclass(frozen=True)
class ResolvedPaths:
    config: Path
    gpt: Path
    s2mel: Path
    w2v_stat: Path
    spk_matrix: Path
    emo_matrix: Path
    bpe_model: Path
    w2v_bert: Path
    codec: Path
    campplus: Path
    bigvgan: Path

    def files(self) -> Iterator[tuple[str, Path]]:
        """(label, path) of every file the model reads, in a fixed order (for the digest)."""
        for name in ("config", "gpt", "s2mel", "w2v_stat", "spk_matrix", "emo_matrix", "bpe_model"):
            yield name, getattr(self, name)
        yield from auxiliary_files({m.key: getattr(self, m.key) for m in AUX_MODELS})

    def check_exist(self) -> None:
        missing = [(label, p) for label, p in self.files() if not p.is_file()]
        if missing:
            raise missing_files_error(missing)


def auxiliary_files(
    aux: dict[str, Path], models: tuple[AuxModel, ...] = AUX_MODELS
) -> Iterator[tuple[str, Path]]:
    """(label, path) of each file of the auxiliary models: `w2v_bert/config.json`, `codec`, ..."""
    for m in models:
        if m.folder:
            for f in m.files:
                yield f"{m.key}/{Path(f).name}", aux[m.key] / Path(f).name
        else:
            yield m.key, aux[m.key]


def source_of(label: str, path: Path, main_repo: str = MAIN_REPO) -> str:
    """The repository a file of the checkpoint comes from (and its name there when it differs), for
    error messages: `(from funasr/campplus)`, `(semantic_codec/model.safetensors from amphion/MaskGCT)`."""
    key, _, inner = label.partition("/")
    model = AUX_BY_KEY.get(key)
    if model is None:
        return f"(from {main_repo})"
    name = inner if model.folder else model.files[0]
    return f"(from {model.repo})" if name == path.name else f"({name} from {model.repo})"


def missing_files_error(
    missing: list[tuple[str, Path]], main_repo: str = MAIN_REPO, hint: str | None = None
) -> MissingDependencyError:
    """One error naming every missing file, where it was expected and where it comes from. `hint`
    replaces the default advice (fetch IndexTTS-2, or point the auxiliary-model flags at copies)."""
    items = "; ".join(f"{p} {source_of(label, p, main_repo)}" for label, p in missing)
    n = len(missing)
    msg = f"checkpoint incomplete: {n} model file{'s' * (n != 1)} missing: {items}"
    if hint is not None:
        return MissingDependencyError(msg, hint=hint)
    keys = {label.split("/")[0] for label, _ in missing}
    flags = [f"--{m.key.replace('_', '-')}" for m in AUX_MODELS if m.key in keys]
    hint = (
        "fetch the release with `fasttts download DIR` (pip install 'fasttts-cli[download]') and build "
        "with --checkpoint DIR"
    )
    if flags:
        hint += f", or point {', '.join(flags)} at copies you have"
    return MissingDependencyError(msg, hint=hint)


def locate_checkpoint(paths: CheckpointPaths, env: Mapping[str, str] | None = None) -> CheckpointPaths:
    """`paths` with its root moved to the folder holding config.yaml (a Hugging Face snapshot, for the
    cache layouts) and every auxiliary model not given explicitly found in hf_cache/ or a hub; one not
    found anywhere keeps its official place under hf_cache/, where check_exist names it."""
    layout = find_layout(paths.root, env)
    found = {}
    for model in AUX_MODELS:
        if getattr(paths, model.key) is None:
            found[model.key] = find_auxiliary(layout, model)
    return replace(paths, root=layout.root, **{k: v for k, v in found.items() if v is not None})


@dataclass
class ModelModules:
    """Every module of a model (IndexTTS-2 or 2.5), loaded strictly, plus the small arrays the runtime
    needs; each version adds what only it has."""

    config: IndexTTS2Config
    paths: Any  # ResolvedPaths (IndexTTS-2) or checkpoint25.ResolvedPaths25
    gpt: Any  # nets.unified_voice.UnifiedVoice / nets.unified_voice25.UnifiedVoice25
    s2mel: Any  # nets.s2mel.S2Mel (2.5: without gpt_layer)
    w2v_bert: Any  # nets.w2v_bert.W2VBertFeatures (stats folded in)
    codec: Any  # nets.codec.SemanticCodec / nets.codec_enhanced.EnhancedCodec (decoder side)
    campplus: Any  # nets.campplus.CAMPPlus
    bigvgan: Any  # nets.bigvgan.BigVGAN
    w2v_mean: np.ndarray  # (1024,)
    w2v_var: np.ndarray  # (1024,)
    spk_matrix: np.ndarray  # feat1 (sum(emo_num), style_dim)
    emo_matrix: np.ndarray  # feat2 (sum(emo_num), model_dim)

    def digest(self) -> str:
        return checkpoint_digest(self.paths)

    @property
    def random_weights(self) -> bool:
        """Whether config.yaml says the weights are random (written by `fasttts tiny-checkpoint`)."""
        return self.config.raw.get(RANDOM_KEY) is True


@dataclass
class IndexTTS2Modules(ModelModules):
    """IndexTTS-2's modules (see ModelModules)."""

    @property
    def bpe_model(self) -> Path:
        return self.paths.bpe_model


class ListsFiles(Protocol):
    def files(self) -> Iterator[tuple[str, Path]]: ...


def checkpoint_digest(paths: ListsFiles) -> str:
    """sha256 over `label:sha256(file)` lines of every file the model reads (overrides included)."""
    lines = [f"{label}:{file_sha256(p)}\n" for label, p in paths.files()]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def read_matrix(path: Path, rows: int, cols: int, what: str) -> np.ndarray:
    """A bare (rows, cols) tensor file (feat1/feat2) as float32."""
    import torch

    from fasttts_cli.nets.weights import torch_load

    t = torch_load(path)
    if not isinstance(t, torch.Tensor):
        raise InputError(path, f"expected a bare tensor ({what}), got {type(t).__name__}")
    if tuple(t.shape) != (rows, cols):
        raise InputError(path, f"{what} has shape {tuple(t.shape)}, config.yaml implies {(rows, cols)}")
    return t.detach().float().numpy().copy()


def read_w2v_stats(path: Path, width: int) -> tuple[np.ndarray, np.ndarray]:
    """wav2vec2bert_stats.pt = {'mean', 'var'}, each `width` values."""
    from fasttts_cli.nets.weights import torch_load

    blob = torch_load(path)
    if not isinstance(blob, dict):
        raise InputError(path, "expected a dict with keys 'mean' and 'var'")
    for k in ("mean", "var"):
        if k not in blob:
            raise InputError(path, f"missing key {k}")
    extra = sorted(set(blob) - {"mean", "var"})
    if extra:
        raise InputError(path, f"unexpected key {extra[0]}")
    mean = blob["mean"].detach().float().reshape(-1).numpy().copy()
    var = blob["var"].detach().float().reshape(-1).numpy().copy()
    for k, a in (("mean", mean), ("var", var)):
        if a.size != width:
            raise InputError(path, f"key {k} has {a.size} values, w2v-BERT width is {width}")
    return mean, var


def load_checkpoint(paths: CheckpointPaths | Path | str) -> IndexTTS2Modules:
    """Load every module of an official-layout checkpoint (eval mode, fp32, strict keys)."""
    import torch

    from fasttts_cli.nets.bigvgan import load_bigvgan
    from fasttts_cli.nets.campplus import load_campplus
    from fasttts_cli.nets.codec import load_codec
    from fasttts_cli.nets.s2mel import load_s2mel
    from fasttts_cli.nets.unified_voice import load_unified_voice
    from fasttts_cli.nets.w2v_bert import load_w2v_bert
    from fasttts_cli.nets.weights import built_from

    if not isinstance(paths, CheckpointPaths):
        paths = CheckpointPaths(Path(paths))
    if not paths.root.is_dir():
        raise InputError(paths.root, "checkpoint directory not found")
    paths = locate_checkpoint(paths)
    if not paths.config_path.is_file():
        # without config.yaml the other main files have no names yet: name it and the auxiliary models
        missing = [("config", paths.config_path)]
        missing += [(lb, p) for lb, p in auxiliary_files(paths.auxiliary()) if not p.is_file()]
        raise missing_files_error(missing)
    cfg = load_config(paths.config_path)
    rp = paths.resolve(cfg)
    rp.check_exist()
    n_proto = sum(cfg.emo_num)
    with torch.no_grad(), built_from(rp.config):
        w2v = load_w2v_bert(rp.w2v_bert, rp.w2v_stat)
        width = int(w2v.mean.numel())
        mean, var = read_w2v_stats(rp.w2v_stat, width)
        gpt = load_unified_voice(rp.gpt, cfg.raw["gpt"], cond_input_size=width, config_path=rp.config)
        s2mel = load_s2mel(rp.s2mel, cfg.raw["s2mel"])
        codec = load_codec(rp.codec, cfg.raw.get("semantic_codec"))
        campplus = load_campplus(rp.campplus)
        bigvgan = load_bigvgan(rp.bigvgan)
    style_dim = int(campplus.xvector.dense.linear.weight.shape[0])
    if style_dim != cfg.s2mel.style_dim:
        raise InputError(
            rp.campplus,
            f"CAMPPlus embeds {style_dim} values, "
            f"config.yaml s2mel.style_encoder.dim is {cfg.s2mel.style_dim}",
        )
    return IndexTTS2Modules(
        config=cfg,
        paths=rp,
        gpt=gpt,
        s2mel=s2mel,
        w2v_bert=w2v,
        codec=codec,
        campplus=campplus,
        bigvgan=bigvgan,
        w2v_mean=mean,
        w2v_var=var,
        spk_matrix=read_matrix(rp.spk_matrix, n_proto, cfg.s2mel.style_dim, "spk_matrix (feat1)"),
        emo_matrix=read_matrix(rp.emo_matrix, n_proto, cfg.gpt.model_dim, "emo_matrix (feat2)"),
    )
