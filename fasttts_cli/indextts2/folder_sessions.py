"""An engine folder's components, opened on first use through the backend registry.

Each manifest entry names its backend; `spec.registry` says how that backend opens a component
(an ONNX Runtime or TensorRT session, a TensorRT-LLM worker) and what it needs installed. A graph
component's IO names are checked against what this runtime feeds and reads (`components.required_io`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fasttts_cli.backends.onnxruntime.session import SessionOptions
from fasttts_cli.errors import EngineMismatchError
from fasttts_cli.indextts2.components import (
    GPT_TRUNK,
    VOICE_CHAIN_SESSIONS,
    artifact,
    gpt_component,
    io_matches,
    required_io,
    runtime_components,
)
from fasttts_cli.spec import registry
from fasttts_cli.spec.engine_folder import Manifest


class FolderSessions:
    """The opened components of one engine folder, by manifest component name."""

    def __init__(
        self,
        folder: Path,
        manifest: Manifest,
        options: SessionOptions,
        context: Mapping[str, Callable[[], Mapping[str, Any]]] | None = None,
    ) -> None:
        """`context`: per component name, what its registry opener takes beyond (path, options), made
        only when that component opens (the TensorRT-LLM GPT's host tables load with it, not before)."""
        self.folder = folder
        self.manifest = manifest
        self.options = options
        self.context = dict(context or {})
        self.layers = int(manifest.config["gpt"]["layers"])
        self.gpt = gpt_component(manifest.components)
        self._open: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def opened(self) -> dict[str, Any]:
        """The components opened so far (a copy)."""
        return dict(self._open)

    def get(self, name: str) -> Any:
        s = self._open.get(name)
        if s is not None:
            return s
        with self._lock:  # a voice's two chains may ask for the same session at once
            s = self._open.get(name)
            if s is None:
                s = self._open[name] = self._start(name)
            return s

    def open_all(self) -> None:
        for name in runtime_components(self.gpt):
            self.get(name)

    @property
    def voice_chains_side_by_side(self) -> bool:
        """Whether a voice's speaker and emotion chains run concurrently (CPU sessions, >= 2 threads)."""
        cpu = all(
            self.manifest.components[n].backend in registry.on_device(registry.CPU)
            for n in VOICE_CHAIN_SESSIONS
            if n in self.manifest.components
        )
        return cpu and self.options.resolved_threads() >= 2

    def close(self) -> None:
        for s in self._open.values():
            closer = getattr(s, "close", None)  # a worker process (TensorRT-LLM) has one to stop
            if closer is not None:
                closer()
        self._open.clear()

    def _start(self, name: str) -> Any:
        comp = self.manifest.components[name]
        opts = self.options
        if name == GPT_TRUNK:
            # the trunk runs back to back (one call per generated token): its workers may keep spinning
            opts = replace(opts, spin_after_run=True)
        elif name in VOICE_CHAIN_SESSIONS and self.voice_chains_side_by_side:
            opts = replace(opts, threads=max(1, opts.resolved_threads() // 2))
        context = self.context[name]() if name in self.context else {}
        s = registry.get(comp.backend).open(self.folder / comp.file, opts, **context)
        if artifact(name) == registry.GRAPH:
            self._check_io(name, s)
        return s

    def _check_io(self, name: str, s: Any) -> None:
        want_in, want_out = required_io(self.layers)[name]
        have_in = {i.name for i in s.inputs}
        have_out = {o.name for o in s.outputs}
        if not io_matches(name, self.layers, have_in, have_out):
            raise EngineMismatchError(
                f"{self.folder / self.manifest.components[name].file}: component {name!r} has inputs "
                f"{sorted(have_in)} and outputs {sorted(have_out)}; this runtime feeds {list(want_in)} "
                f"and reads {list(want_out)}",
                hint="rebuild the engine with this version of `fasttts build`",
            )
