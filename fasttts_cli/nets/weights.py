"""Strict state-dict loading shared by every module loader of the official checkpoint layout."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from fasttts_cli.errors import InputError


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


def torch_load(path: Path) -> object:
    """torch.load with weights_only (no arbitrary pickle code), mapping errors to a clear message."""
    if not path.is_file():
        raise InputError(
            path, "file not found", hint="check the checkpoint directory or the flag pointing at it"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for corrupt files
        raise InputError(path, f"cannot load: {e}") from None
