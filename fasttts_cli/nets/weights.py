"""Strict state-dict loading shared by every module loader of the official checkpoint layout."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fasttts_cli.errors import FastTTSError, InputError
from fasttts_cli.spec.text_files import parse_text_file

CHECK_HINT = "check the checkpoint directory or the flag pointing at it"


class CheckpointKeyError(InputError):
    """A checkpoint file lacks a key the module needs, or holds one it does not know."""


def strict_load(
    module: torch.nn.Module,
    state: Mapping[str, torch.Tensor],
    file: Path | str,
    *,
    ignore: Iterable[str] = (),
    prefix: str = "",
) -> None:
    """Load `state` into `module`, failing with the file and key on any missing/unexpected/misshaped key.

    `ignore` lists key prefixes that the spec says to drop (they are neither required nor loaded).
    `prefix` names where in the file the dict sits (e.g. "net/cfm/"), for the message only.
    """
    ignore = tuple(ignore)
    state = {k: v for k, v in state.items() if not k.startswith(ignore)} if ignore else dict(state)
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing:
        raise CheckpointKeyError(
            file,
            f"missing key {prefix}{missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
        )
    if unexpected:
        raise CheckpointKeyError(
            file,
            f"unexpected key {prefix}{unexpected[0]}"
            + (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""),
            hint="is this the official IndexTTS-2 layout, and the matching config.yaml?",
        )
    for k, v in own.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise CheckpointKeyError(
                file,
                f"key {prefix}{k} has shape {tuple(state[k].shape)}, config.yaml implies {tuple(v.shape)}",
            )
    module.load_state_dict(state, strict=True)


def split_known(
    state: Mapping[str, torch.Tensor], prefixes: Iterable[str]
) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
    """(state without the keys under `prefixes`, those keys sorted): a file's known extras, which the
    spec says the original loads or skips without using, set apart so the rest loads strictly."""
    prefixes = tuple(prefixes)
    extras = tuple(sorted(k for k in state if k.startswith(prefixes)))
    return {k: v for k, v in state.items() if not k.startswith(prefixes)}, extras


@contextmanager
def checkpoint_file(path: Path, hint: str = CHECK_HINT) -> Iterator[Path]:
    """The one guard of every read of a checkpoint file (torch, safetensors, JSON, YAML, tokenizer): a
    missing file, or one its reader refuses in any way (truncated, corrupt, the wrong format; every
    library raises its own types), is an InputError naming the file (exit 2), never an internal error."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found", hint=hint)
    try:
        yield path
    except (FastTTSError, MemoryError):
        raise
    except Exception as e:  # each reader has its own error types: all mean "unreadable"
        why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise InputError(
            path, f"cannot load ({why}); the file is damaged or not the expected format", hint=hint
        ) from None


@contextmanager
def built_from(config: Path) -> Iterator[None]:
    """Modules built from `config`'s sizes: a setting no module can take (a negative width, a zero
    head count) fails inside torch with its own error; it is an InputError naming the config (exit 2).
    The files' own errors are named by checkpoint_file and strict_load before they get here."""
    try:
        yield
    except (FastTTSError, MemoryError):
        raise
    except Exception as e:  # torch.nn's constructors raise RuntimeError, ValueError, ZeroDivisionError...
        why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise InputError(
            config,
            f"the model cannot be built from these settings ({type(e).__name__}: {why})",
            hint="check config.yaml's sizes against the checkpoint it came with",
        ) from None


def torch_load(path: Path) -> object:
    """torch.load with weights_only (no arbitrary pickle code), through the checkpoint-file guard."""
    with checkpoint_file(path):
        return torch.load(path, map_location="cpu", weights_only=True)


def safetensors_load(path: Path, hint: str = CHECK_HINT) -> dict[str, torch.Tensor]:
    """A .safetensors file's tensors, through the checkpoint-file guard (a truncated file is exit 2)."""
    from safetensors.torch import load_file

    with checkpoint_file(path, hint):
        return load_file(str(path))


def json_config(path: Path, hint: str = CHECK_HINT) -> dict[str, Any]:
    """A checkpoint's JSON config (an object of keys), through the checkpoint-file guard."""

    # the project's one reader of text files: "cannot read: ..." / "not valid JSON: ..." naming the file
    def with_hint(where: object, message: str) -> InputError:
        return InputError(where, message, hint=hint)

    data = parse_text_file(path, json.loads, json.JSONDecodeError, "JSON", error=with_hint)  # type: ignore[arg-type]
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object of settings, got {type(data).__name__}", hint=hint)
    return data
