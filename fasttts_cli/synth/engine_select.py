"""Which engine runs: `--engine NAME|PATH`, else $FASTTTS_ENGINE, else the draft voice (with a notice)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fasttts_cli.errors import MissingDependencyError
from fasttts_cli.spec.engine_folder import MANIFEST

ENV_VAR = "FASTTTS_ENGINE"
DRAFT = "draft"
TORCH = "torch"  # the PyTorch GPU backend, run from a checkpoint directory


@dataclass(frozen=True)
class EngineSelection:
    kind: str  # "draft", "torch" (checkpoint directory) or the manifest's model id ("indextts2")
    path: Path | None  # engine folder or checkpoint directory; None for the draft voice
    reason: str  # how it was chosen, for `doctor` and the JSON result


def engines_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "engines"


def is_checkpoint_dir(path: Path) -> bool:
    """An official IndexTTS-2 or 2.5 checkpoint directory: gpt.pth beside a config (2.5's may be
    config_v2_5.yaml or configs/config_v2_5.yaml)."""
    from fasttts_cli.nets.release_layout25 import CONFIG_NAMES

    return (path / "gpt.pth").is_file() and any((path / n).is_file() for n in CONFIG_NAMES)


def select_engine(flag: str | None, env: dict[str, str] | None = None) -> EngineSelection:
    env = os.environ if env is None else env
    if flag:
        return _resolve(flag, "--engine")
    if env.get(ENV_VAR):
        return _resolve(env[ENV_VAR], f"${ENV_VAR}")
    return EngineSelection(DRAFT, None, "no IndexTTS-2 engine configured (--engine or $FASTTTS_ENGINE)")


def _resolve(value: str, source: str) -> EngineSelection:
    if value == DRAFT:
        return EngineSelection(DRAFT, None, f"{source}=draft")
    candidates = [Path(value).expanduser()]
    if "/" not in value:
        candidates.append(engines_root() / value)
    for c in candidates:
        if is_checkpoint_dir(c):
            # An official checkpoint directory: only the PyTorch backend runs straight from one.
            return EngineSelection(TORCH, c, f"{source}={value} (checkpoint directory: torch backend)")
        if (c / MANIFEST).is_file():
            import json

            try:
                raw = json.loads((c / MANIFEST).read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                raw = {}  # unreadable: the engine's own load says so, naming the manifest
            model = raw.get("model_id", "indextts2") if isinstance(raw, dict) else "indextts2"
            return EngineSelection(str(model), c, f"{source}={value}")
    raise MissingDependencyError(
        f"{source}: {value!r} is not an engine folder (no {MANIFEST} in {', '.join(map(str, candidates))})",
        hint="build one with `fasttts build --checkpoint DIR --preset cpu-fp32`, give a checkpoint directory "
        "(PyTorch backend), or use --engine draft",
    )
