"""The engine folder: a self-contained, self-describing directory of built components.

Layout (see engines/README.md): `manifest.json`, one file per component (`gpt.onnx`, ...), the
tokenizer, and the small tensors the runtime needs as `.npy`. The runtime reads nothing else:
never the checkpoint directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.errors import EngineMismatchError, MissingDependencyError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ComponentEntry:
    file: str  # relative to the engine folder
    backend: str
    precision: str
    inputs: dict[str, list[Any]] = field(default_factory=dict)  # name -> shape (ints or axis names)
    outputs: dict[str, list[Any]] = field(default_factory=dict)
    sha256: str = ""


@dataclass(frozen=True)
class Manifest:
    model_id: str  # e.g. "indextts2"
    model_version: str  # e.g. "2.0"
    checkpoint_digest: str
    preset: str
    preset_build_keys: dict[str, Any]
    components: dict[str, ComponentEntry]
    opset: int | None = None
    tool_version: str = ""
    files: dict[str, str] = field(default_factory=dict)  # auxiliary files: tokenizer, .npy tensors
    config: dict[str, Any] = field(default_factory=dict)  # model sizes/constants the runtime needs
    s2mel_cache_policy: dict[str, Any] | None = None
    # built from a random-weight checkpoint (`fasttts tiny-checkpoint`): it neither clones nor speaks;
    # absent from manifests written before the field existed, which are real checkpoints
    random_weights: bool = False
    format_version: int = FORMAT_VERSION

    def identity(self) -> str:
        """Stable string for cache keys: changes whenever the engine's output could change."""
        comp = ",".join(
            f"{k}:{v.backend}/{v.precision}/{v.sha256[:12]}" for k, v in sorted(self.components.items())
        )
        pol = json.dumps(self.s2mel_cache_policy, sort_keys=True) if self.s2mel_cache_policy else "-"
        return (
            f"{self.model_id}-{self.model_version}@{self.checkpoint_digest[:16]}|{self.preset}|{comp}|{pol}"
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Manifest:
        d = dict(d)
        d["components"] = {k: ComponentEntry(**v) for k, v in d.get("components", {}).items()}
        return Manifest(**d)


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    """Write atomically: a crash mid-write never leaves a half manifest that looks valid."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(manifest.to_json(), encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)
    return folder / MANIFEST


def read_manifest(folder: Path, *, expect_model: str | None = None) -> Manifest:
    path = folder / MANIFEST
    if not folder.is_dir():
        raise MissingDependencyError(
            f"{folder}: engine folder not found", hint="build one with `fasttts build`"
        )
    if not path.is_file():
        raise MissingDependencyError(f"{path}: missing; {folder} is not an engine folder")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # ValueError: bad JSON or not UTF-8
        raise EngineMismatchError(f"{path}: unreadable manifest: {e}") from None
    if not isinstance(raw, dict):
        raise EngineMismatchError(f"{path}: a manifest is a JSON object, not {type(raw).__name__}")
    fv = raw.get("format_version")
    if fv != FORMAT_VERSION:
        raise EngineMismatchError(
            f"{path}: engine format_version {fv!r}, this fasttts reads {FORMAT_VERSION}",
            hint="rebuild the engine with this version of `fasttts build`",
        )
    try:
        m = Manifest.from_dict(raw)
        paths = [(f"component {n!r} file {c.file}", folder / c.file) for n, c in m.components.items()]
        paths += [
            (f"file {rel} ({key}) listed in the manifest", folder / rel) for key, rel in m.files.items()
        ]
    except (TypeError, AttributeError, ValueError) as e:  # a key of the wrong type or shape
        raise EngineMismatchError(f"{path}: manifest does not match the expected schema: {e}") from None
    if expect_model is not None and m.model_id != expect_model:
        raise EngineMismatchError(f"{path}: engine is for model {m.model_id!r}, expected {expect_model!r}")
    for what, file in paths:
        if not file.exists():
            raise EngineMismatchError(f"{folder}: {what} is missing")
    return m


def check_preset_matches(
    manifest: Manifest, preset_name: str, build_keys: dict[str, Any], folder: Path
) -> None:
    """A run-time preset may change run-time keys only; build-time keys must equal the engine's."""
    if build_keys != manifest.preset_build_keys:
        diff = _differing_keys(build_keys, manifest.preset_build_keys)
        hint = f"use --preset {manifest.preset} or rebuild the engine with --preset {preset_name}"
        if preset_name == manifest.preset:  # same name: the preset file changed since the build
            hint = (
                f"preset {preset_name!r} changed since this engine was built (an upgrade?): rebuild it with "
                f"`fasttts build --checkpoint DIR --preset {preset_name}`"
            )
        raise EngineMismatchError(
            f"{folder}: engine was built with preset {manifest.preset!r}; preset {preset_name!r} differs in "
            f"build-time keys: {', '.join(diff)}",
            hint=hint,
        )


def _differing_keys(a: dict[str, Any], b: dict[str, Any], prefix: str = "", depth: int = 2) -> list[str]:
    """Dotted keys whose values differ, down to `depth` levels (components.dit, limits.max_batch)."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if va == vb:
            continue
        if depth > 1 and isinstance(va, dict) and isinstance(vb, dict):
            out += _differing_keys(va, vb, f"{prefix}{k}.", depth - 1)
        else:
            out.append(prefix + k)
    return out


def file_sha256(*paths: Path | str) -> str:
    """sha256 over the bytes of `paths`, in order (read in 4 MiB blocks: engine files pass 1 GB)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def component_sha256(path: Path) -> str:
    """A component's digest: its graph file and, when present, its external-data file."""
    data = path.with_name(path.name + ".data")
    return file_sha256(path, data) if data.is_file() else file_sha256(path)
