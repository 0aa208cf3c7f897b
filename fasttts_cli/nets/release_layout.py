"""Where the files of an IndexTTS-2 checkpoint are, in every layout a user may have on disk.

The public release is five Hugging Face repositories: `IndexTeam/IndexTTS-2` (config.yaml, gpt.pth,
s2mel.pth, bpe.model, wav2vec2bert_stats.pt, feat1.pt, feat2.pt and the optional Qwen emotion model) and
four auxiliary models the original's `infer_v2.py` fetches with `hf_hub_download` / `from_pretrained`
(`AUX_MODELS`). `find_layout` accepts:

- the official folder: the main files plus `hf_cache/{w2v-bert-2.0/, semantic_codec_model.safetensors,
  campplus_cn_common.bin, bigvgan/}` (what `fasttts download` and `fasttts tiny-checkpoint` write);
- the original's own cache: `hf_cache/` holding `models--.../snapshots/...` (infer_v2 sets
  HF_HUB_CACHE=./checkpoints/hf_cache);
- a release folder: the plain download of `IndexTeam/IndexTTS-2`, without `hf_cache/`;
- a Hugging Face cache: a snapshot folder (`.../models--IndexTeam--IndexTTS-2/snapshots/<rev>/`), the
  `models--IndexTeam--IndexTTS-2` folder, or the hub folder holding it.

Auxiliary models are looked for in `hf_cache/` under the official names, then in the same hub, then in
the user's hub (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`). The cache layout
is parsed here (refs/main names the revision; snapshots/<rev>/<file> are symlinks into blobs/), so
resolution works offline and without huggingface_hub installed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fasttts_cli.errors import MissingDependencyError

MAIN_REPO = "IndexTeam/IndexTTS-2"
HUB_KINDS = ("snapshot", "repo", "hub")


@dataclass(frozen=True)
class AuxModel:
    """One auxiliary model: its repository, the files inference reads, and its place in the official
    layout (`official` under hf_cache/: a folder holding the files by their base names, or one file)."""

    key: str  # the CheckpointPaths field (and build flag --w2v-bert, --codec, ...)
    repo: str
    files: tuple[str, ...]  # paths inside the repository
    official: str
    folder: bool

    def official_files(self) -> tuple[str, ...]:
        """Paths relative to hf_cache/ of the official layout, in `files` order."""
        if self.folder:
            return tuple(f"{self.official}/{Path(f).name}" for f in self.files)
        return (self.official,)

    def path_in(self, snapshot: Path) -> Path:
        """The CheckpointPaths value for a snapshot of this repository: the folder or the one file."""
        return snapshot if self.folder else snapshot / self.files[0]


AUX_MODELS: tuple[AuxModel, ...] = (
    # SeamlessM4TFeatureExtractor / Wav2Vec2BertModel.from_pretrained("facebook/w2v-bert-2.0"); our
    # feature front end is built in, so the preprocessor JSON is not read
    AuxModel("w2v_bert", "facebook/w2v-bert-2.0", ("config.json", "model.safetensors"), "w2v-bert-2.0", True),
    # hf_hub_download("amphion/MaskGCT", filename="semantic_codec/model.safetensors")
    AuxModel(
        "codec",
        "amphion/MaskGCT",
        ("semantic_codec/model.safetensors",),
        "semantic_codec_model.safetensors",
        False,
    ),
    # hf_hub_download("funasr/campplus", filename="campplus_cn_common.bin")
    AuxModel("campplus", "funasr/campplus", ("campplus_cn_common.bin",), "campplus_cn_common.bin", False),
    # BigVGAN.from_pretrained(cfg.vocoder.name): config.json + bigvgan_generator.pt
    AuxModel(
        "bigvgan",
        "nvidia/bigvgan_v2_22khz_80band_256x",
        ("config.json", "bigvgan_generator.pt"),
        "bigvgan",
        True,
    ),
)
AUX_BY_KEY = {m.key: m for m in AUX_MODELS}


@dataclass(frozen=True)
class Layout:
    """What `find_layout` made of a --checkpoint folder."""

    kind: str  # "official", "release", or one of HUB_KINDS
    root: Path  # the folder holding config.yaml and the other files of MAIN_REPO
    hubs: tuple[Path, ...]  # Hugging Face hub folders searched for the auxiliary models, in order


def repo_folder(repo: str) -> str:
    """The cache folder name of a model repository: models--owner--name."""
    return "models--" + repo.replace("/", "--")


def default_hub(env: Mapping[str, str] | None = None) -> Path:
    """huggingface_hub's cache folder, by its own rules (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def snapshot(repo_dir: Path, files: Sequence[str]) -> Path | None:
    """The snapshot of a cached repository holding every one of `files`: the revision refs/main names
    first, else the newest other snapshot (a download pinned to a revision writes no refs/main)."""
    snaps = repo_dir / "snapshots"
    if not snaps.is_dir():
        return None
    candidates: list[Path] = []
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        with contextlib.suppress(OSError):
            candidates.append(snaps / ref.read_text(encoding="utf-8").strip())
    others = [p for p in snaps.iterdir() if p.is_dir() and p not in candidates]
    candidates += sorted(others, key=lambda p: p.stat().st_mtime, reverse=True)
    for c in candidates:
        if c.is_dir() and all((c / f).is_file() for f in files):
            return c
    return None


def find_layout(path: Path | str, env: Mapping[str, str] | None = None) -> Layout:
    """Classify a --checkpoint folder (see the module docstring). Raises MissingDependencyError when a
    cache folder holds no usable snapshot of the main repository."""
    p = Path(path).expanduser()
    main = repo_folder(MAIN_REPO)
    repo_dir: Path | None = None
    hub: Path | None = None
    if (p / main).is_dir():
        kind, repo_dir, hub = "hub", p / main, p
    elif p.name.startswith("models--") and (p / "snapshots").is_dir():
        kind, repo_dir, hub = "repo", p, p.parent
    elif p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
        kind, hub = "snapshot", p.parent.parent.parent
    else:
        kind = "official" if (p / "hf_cache").is_dir() else "release"
    root = p
    if repo_dir is not None:
        snap = snapshot(repo_dir, ("config.yaml",))
        if snap is None:
            raise MissingDependencyError(
                f"{repo_dir}: no snapshot of {MAIN_REPO} with config.yaml (incomplete download?)",
                hint="fetch the release with `fasttts download DIR`, then build with --checkpoint DIR",
            )
        root = snap
    hubs: list[Path] = []
    for h in (hub, root / "hf_cache", default_hub(env)):
        if h is not None and h.is_dir() and all(_not_same(h, o) for o in hubs):
            hubs.append(h)
    return Layout(kind, root, tuple(hubs))


def _not_same(a: Path, b: Path) -> bool:
    try:
        return not a.samefile(b)
    except OSError:
        return a != b


def find_auxiliary(layout: Layout, model: AuxModel) -> Path | None:
    """Where `model` is: hf_cache/ under its official name, else a snapshot in one of the hubs. When no
    copy is complete, the partial one (so that only its missing files get named); None when none."""
    hf = layout.root / "hf_cache"
    present = [(hf / rel).is_file() for rel in model.official_files()]
    if all(present):
        return hf / model.official
    for hub in layout.hubs:
        snap = snapshot(hub / repo_folder(model.repo), model.files)
        if snap is not None:
            return model.path_in(snap)
    if any(present):
        return hf / model.official
    for hub in layout.hubs:
        snap = snapshot(hub / repo_folder(model.repo), ())
        if snap is not None:
            return model.path_in(snap)
    return None


def official_path(root: Path, model: AuxModel) -> Path:
    """Where the official layout keeps `model` (the path named when it is missing)."""
    return root / "hf_cache" / model.official
