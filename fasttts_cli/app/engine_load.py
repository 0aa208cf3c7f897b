"""Which synthesizer a job gets, what it reports about itself (kind, identity, random weights), and a token
counter that loads no model (dry runs, inspect)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasttts_cli.errors import MissingDependencyError
from fasttts_cli.spec import registry
from fasttts_cli.synth.engine_select import DRAFT, TORCH, EngineSelection
from fasttts_cli.synth.synthesizer import Synthesizer

TORCH_PRESET = "gpu-torch-fp16"  # what a checkpoint directory runs without --preset
INDEXTTS25 = "indextts2.5"  # an IndexTTS-2.5 engine folder's model_id (indextts25.components.MODEL_ID25)

# ---- engine loading ------------------------------------------------------------------------------


def load_synthesizer(
    selection: EngineSelection, preset: str | None, *, cache_dir: Path | None = None
) -> Synthesizer:
    """The Synthesizer for an engine selection; heavy imports happen here and only here.
    `cache_dir`: where an engine may keep prepared voice conditioning (the job's work dir)."""
    if selection.kind == DRAFT:
        from fasttts_cli.synth.draft import DraftSynthesizer

        return DraftSynthesizer.load(None, preset)
    if selection.kind == "indextts2":
        try:
            from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
        except ImportError as e:
            raise MissingDependencyError(
                f"the IndexTTS-2 runtime cannot be loaded ({e})",
                hint="reinstall fasttts-cli, or use --engine draft",
            ) from None
        if cache_dir is not None:
            return IndexTTS2Synthesizer.load(selection.path, preset, cache_dir=cache_dir)
        return IndexTTS2Synthesizer.load(selection.path, preset)
    if selection.kind == INDEXTTS25:
        from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

        return IndexTTS25Synthesizer.load(selection.path, preset, cache_dir=cache_dir)
    if selection.kind == TORCH:
        assert selection.path is not None
        try:
            synth = torch_synthesizer_class(selection.path)
        except ImportError as e:
            raise MissingDependencyError(
                f"the PyTorch backend cannot be loaded ({e})", hint=registry.install_hint(TORCH)
            ) from None
        return synth.load(selection.path, preset or TORCH_PRESET, cache_dir=cache_dir)
    raise MissingDependencyError(
        f"{selection.path}: engine for model {selection.kind!r} is not supported by this fasttts",
        hint="use an IndexTTS-2 engine folder or --engine draft",
    )


def check_loadable(selection: EngineSelection) -> None:
    """What `dub` checks when it loads this engine, short of opening a model (FastTTSError if it would
    fail): the draft voice's Piper; an engine folder's manifest, components and preset, through
    load_synthesizer itself (its loading is lazy: no session opens); a checkpoint directory's model files
    and the torch backend's import (its load reads every weight, too slow for a check)."""
    if selection.kind != TORCH:
        load_synthesizer(selection, None).close()
        return
    assert selection.path is not None
    try:
        torch_synthesizer_class(selection.path)
    except ImportError as e:
        raise MissingDependencyError(
            f"the PyTorch backend cannot be loaded ({e})", hint=registry.install_hint(TORCH)
        ) from None


def torch_synthesizer_class(checkpoint_dir: Path) -> Any:
    """The PyTorch synthesizer class of a checkpoint directory's model (IndexTTS-2 or 2.5, from the files
    it holds); raises ImportError where torch is not installed."""
    from fasttts_cli.nets.release_layout25 import MODEL_V25, detect_model_version

    if detect_model_version(checkpoint_dir) == MODEL_V25:
        from fasttts_cli.indextts25.synthesizer_torch import TorchSynthesizer25

        return TorchSynthesizer25
    from fasttts_cli.indextts2.synthesizer_torch import TorchSynthesizer

    return TorchSynthesizer


def token_counter(selection: EngineSelection, preset: str | None) -> tuple[Callable[[str], int], str]:
    """A token counter that loads no model (for --dry-run and inspect), and where its counts come from."""
    from fasttts_cli.synth.draft import draft_count_tokens

    if selection.kind == DRAFT:
        return draft_count_tokens, "draft (characters)"
    if selection.kind == TORCH:
        assert selection.path is not None
        try:
            counter = torch_synthesizer_class(selection.path).tokenizer_counter(selection.path)
            return counter, "checkpoint tokenizer"
        except ImportError:
            return draft_count_tokens, "estimate (characters; torch backend unavailable)"
    if selection.kind == INDEXTTS25:
        from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

        return IndexTTS25Synthesizer.tokenizer_counter(selection.path), "engine tokenizer"
    try:
        from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer

        hook = getattr(IndexTTS2Synthesizer, "tokenizer_counter", None)
        if hook is not None:
            return hook(selection.path), "engine tokenizer"
    except ImportError:
        pass
    return draft_count_tokens, "estimate (characters; engine tokenizer unavailable)"


def engine_info(selection: EngineSelection, synth: Synthesizer | None, preset: str | None) -> dict[str, Any]:
    random = engine_random_weights(selection, synth)
    d: dict[str, Any] = {
        "kind": selection.kind,
        "path": str(selection.path) if selection.path else None,
        "reason": selection.reason,
        "preset": getattr(synth, "preset_name", None) or preset or _own_preset(selection),
        "random_weights": random,
    }
    if synth is not None:
        d.update(
            identity=synth.identity(),
            sample_rate=synth.sample_rate,
            clones_voice=synth.clones_voice and not random,
        )
    return d


def _own_preset(selection: EngineSelection) -> str | None:
    """The preset an engine runs when none is given (no model loaded: dry runs); None for the draft."""
    if selection.kind == DRAFT or selection.path is None:
        return None
    if selection.kind == TORCH:
        return TORCH_PRESET
    from fasttts_cli.errors import FastTTSError
    from fasttts_cli.spec.engine_folder import read_manifest

    try:
        return read_manifest(selection.path).preset
    except FastTTSError:
        return None  # an unreadable engine fails its own load with a clear message


def engine_random_weights(selection: EngineSelection, synth: Synthesizer | None = None) -> bool:
    """Whether the engine has random weights: the synthesizer says so, or its manifest does
    (`random_weights`, absent = false), or, for a checkpoint directory, its config.yaml."""
    if getattr(synth, "random_weights", False):
        return True
    if selection.path is None:
        return False
    import json

    import yaml

    from fasttts_cli.nets.checkpoint import RANDOM_KEY
    from fasttts_cli.spec.engine_folder import MANIFEST

    try:
        if selection.kind == TORCH:
            from fasttts_cli.nets.release_layout25 import find_config25  # config.yaml first: v2's too

            cfg = yaml.safe_load(find_config25(selection.path).read_text(encoding="utf-8"))
            return isinstance(cfg, dict) and cfg.get(RANDOM_KEY) is True
        raw = json.loads((selection.path / MANIFEST).read_text(encoding="utf-8"))
        return isinstance(raw, dict) and raw.get("random_weights") is True
    except (OSError, ValueError, yaml.YAMLError):
        return False  # an unreadable engine fails its own load with a clear message


def random_weights_warning(selection: EngineSelection) -> str:
    name = selection.path.name if selection.path is not None else selection.kind
    return (
        f"engine {name} has random weights: it does not clone and speaks noise (a test engine from "
        "`fasttts tiny-checkpoint`); the runaway guard is off for it, since the length of noise means nothing"
    )
