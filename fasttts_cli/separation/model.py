"""The separation model: Demucs v4 `htdemucs` (MIT), where its weights are, and loading them.

The published weights are a Demucs *repository folder*, the layout demucs' own `get_model(name, repo=DIR)`
reads (demucs/repo.py `LocalRepo` + `BagOnlyRepo`): `htdemucs.yaml` names the bag (`models: ['955717e8']`),
and each signature is a `<sig>-<sha256 prefix>.th` file, a `torch.save` of `{'klass', 'args', 'kwargs',
'state', ...}` that `demucs.states.load_model` rebuilds. demucs checks the file's sha256 against the prefix in
its name on every load. We load through that same code, so a folder that demucs' own CLI accepts
(`demucs -n htdemucs --repo DIR`) is one fasttts accepts, and the other way round.

Where the folder is: `--separation-model DIR`, else `$FASTTTS_SEPARATION_MODEL`, else the cache folder
`fasttts download --separation` fills (`$XDG_CACHE_HOME/fasttts/separation/htdemucs`, default
`~/.cache/fasttts/...`). Nothing is ever downloaded here: a missing model is exit 3 naming that command.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttts_cli.errors import MissingDependencyError, UsageError

NAME = "htdemucs"
SIGNATURE = "955717e8"  # the published htdemucs (demucs/remote/files.txt, hybrid_transformer/)
CHECKSUM = "8726e21a"  # the first 8 hex digits of its sha256, as demucs names and checks it
WEIGHTS = f"{SIGNATURE}-{CHECKSUM}.th"
URL_ROOT = "https://dl.fbaipublicfiles.com/demucs/hybrid_transformer/"
ENV = "FASTTTS_SEPARATION_MODEL"
URL_ENV = "FASTTTS_SEPARATION_URL"  # a mirror of URL_ROOT (an offline copy, a company proxy)
FLAG = "--separation-model"
FETCH = "fasttts download --separation"
INSTALL = "pip install 'fasttts-cli[separate]'  (Demucs v4 on the torch already installed)"
DIALOGUE_SOURCE = "vocals"  # every other source (drums, bass, other) is the music-and-effects stem
LICENCES = [
    ("Demucs v4 htdemucs weights (facebookresearch/demucs)", "MIT"),
    ("demucs library (adefossez/demucs)", "MIT"),
]

# The published htdemucs' hyper-parameters: demucs' conf/config.yaml `htdemucs:` defaults with the
# overrides of its training grid (grids/mmi.py: dconv_mode 3, t_layers 5, bottom_channels 512, a 7.8 s
# segment = 10 s * 0.88 - 1 s of shift augmentation). 41,984,456 parameters: what an 80 MiB half-precision
# .th holds. Used only to build random-weight stand-ins of the real architecture (tests, benchmarks).
HTDEMUCS_KWARGS: dict[str, Any] = {
    "sources": ["drums", "bass", "other", "vocals"],
    "audio_channels": 2,
    "samplerate": 44100,
    "segment_fraction": (39, 5),
    "channels": 48,
    "growth": 2,
    "nfft": 4096,
    "depth": 4,
    "dconv_mode": 3,
    "t_layers": 5,
    "t_dropout": 0.02,
    "bottom_channels": 512,
}
# A small config of the same class for fast tests: the real loader and apply path, a fraction of the work.
SMALL_KWARGS: dict[str, Any] = {
    **HTDEMUCS_KWARGS,
    "segment_fraction": (1, 1),
    "channels": 8,
    "t_layers": 1,
    "bottom_channels": 0,
}


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    return root / "fasttts" / "separation" / NAME


@dataclass(frozen=True)
class ModelFiles:
    """A Demucs repository folder holding one bag: its yaml and the weight files it names."""

    folder: Path
    name: str  # the bag's name (the yaml's stem)
    weights: tuple[Path, ...]
    where: str  # how it was found: the flag, the variable, or the cache folder

    def digest(self) -> str:
        """sha256 over the bag definition and every weight file: the cache key of what it separates."""
        h = hashlib.sha256((self.folder / f"{self.name}.yaml").read_bytes())
        for w in self.weights:
            h.update(_file_sha256(w).encode())
        return h.hexdigest()

    def describe(self) -> str:
        return f"{self.name} ({', '.join(w.name for w in self.weights)}) in {self.folder}"


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        _SHA_MEMO[key] = h.hexdigest()
    return _SHA_MEMO[key]


def model_dir(flag: Path | None) -> tuple[Path, str]:
    if flag is not None:
        return Path(flag).expanduser(), f"{FLAG} {flag}"
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser(), f"${ENV}={env}"
    return default_dir(), "the default cache folder"


def locate(flag: Path | None = None) -> ModelFiles:
    """The model folder's files, checked for presence (not loaded). Exit 3 naming the fetch command when
    anything is missing; a flag naming a file rather than a folder is a usage error."""
    folder, where = model_dir(flag)
    hint = f"fetch it with `{FETCH}` (once, ~80 MB), or point {FLAG} / ${ENV} at a Demucs model folder"
    if flag is not None and folder.is_file():
        raise UsageError(
            f"{FLAG} {flag}: a file; give the Demucs model folder that holds it (with {NAME}.yaml)",
            hint=f"the folder {FETCH} fills holds {NAME}.yaml and {WEIGHTS}",
        )
    if not folder.is_dir():
        raise MissingDependencyError(f"separation model: no folder {folder} ({where})", hint=hint)
    yamls = sorted(folder.glob("*.yaml"))
    chosen = folder / f"{NAME}.yaml" if (folder / f"{NAME}.yaml").is_file() else None
    if chosen is None and len(yamls) == 1:
        chosen = yamls[0]
    if chosen is None:
        found = ", ".join(p.name for p in yamls) or "none"
        raise MissingDependencyError(
            f"separation model: {folder} has no {NAME}.yaml (yaml files: {found}) ({where})", hint=hint
        )
    sigs = _signatures(chosen)
    weights = []
    for sig in sigs:
        files = sorted(p for p in folder.glob(f"{sig}*.th") if p.stem.split("-")[0] == sig)
        if not files:
            raise MissingDependencyError(
                f"separation model: {chosen} names {sig}, but {folder} has no {sig}-*.th weights ({where})",
                hint=hint,
            )
        weights.append(files[0])
    return ModelFiles(folder, chosen.stem, tuple(weights), where)


def _signatures(yaml_path: Path) -> list[str]:
    import yaml

    try:
        bag = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise MissingDependencyError(
            f"separation model: cannot read {yaml_path}: {e}", hint=f"fetch it again with `{FETCH}`"
        ) from None
    models = bag.get("models") if isinstance(bag, dict) else None
    if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
        raise MissingDependencyError(
            f"separation model: {yaml_path} lists no models (expected `models: ['{SIGNATURE}']`)",
            hint=f"fetch it again with `{FETCH}`",
        )
    return models


def require_demucs() -> None:
    from importlib.util import find_spec

    if find_spec("demucs") is None or find_spec("torch") is None:
        raise MissingDependencyError("--separate needs the demucs package (and torch)", hint=INSTALL)


def load(files: ModelFiles, device: str | None = None) -> Any:
    """The model through demucs' own loader (`get_model(name, repo=folder)`: checksums, bag weights), in
    eval mode on `device` (default: CUDA when there is one)."""
    require_demucs()
    import torch
    from demucs.pretrained import ModelLoadingError, get_model

    try:
        model = get_model(files.name, repo=files.folder)
    except ModelLoadingError as e:
        raise MissingDependencyError(
            f"separation model {files.describe()}: {e}", hint=f"fetch it again with `{FETCH}`"
        ) from None
    except (OSError, RuntimeError, KeyError, EOFError) as e:
        raise MissingDependencyError(
            f"separation model {files.describe()}: cannot load it: {type(e).__name__}: {e}",
            hint=f"fetch it again with `{FETCH}`",
        ) from None
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return model.to(device).eval()


def segment_seconds(model: Any) -> float:
    """The segment the model was trained on (a bag: the shortest of its members')."""
    members = getattr(model, "models", None) or [model]
    return min(float(m.segment) for m in members)


def build_random(folder: Path, *, small: bool = False, seed: int = 0) -> ModelFiles:
    """A random-weight htdemucs of the real architecture (`small`: SMALL_KWARGS) written in the published
    layout: `htdemucs.yaml` and `<sig>-<sha256[:8]>.th` holding what demucs' `serialize_model` holds
    (half-precision state). For tests and benchmarks: weights cannot be downloaded everywhere."""
    import io
    from fractions import Fraction

    import torch
    from demucs.htdemucs import HTDemucs

    kw = dict(SMALL_KWARGS if small else HTDEMUCS_KWARGS)
    num, den = kw.pop("segment_fraction")
    kw["segment"] = Fraction(num, den)
    torch.manual_seed(seed)
    model = HTDemucs(**kw)
    args, kwargs = model._init_args_kwargs
    state = {k: p.data.to(device="cpu", dtype=torch.half) for k, p in model.state_dict().items()}
    package = {"klass": HTDemucs, "args": args, "kwargs": kwargs, "state": state, "training_args": {}}
    buf = io.BytesIO()
    torch.save(package, buf)
    sig = hashlib.sha256(f"random-{seed}-{small}".encode()).hexdigest()[:8]
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / f"{sig}-{hashlib.sha256(buf.getvalue()).hexdigest()[:8]}.th"
    weights.write_bytes(buf.getvalue())
    (folder / f"{NAME}.yaml").write_text(f"models: ['{sig}']\n", encoding="utf-8")
    return locate(folder)
