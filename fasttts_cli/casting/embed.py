"""Speaker embeddings of each cue's source audio, for telling who speaks when (cluster.py).

Two encoders behind one interface (`SpeakerEncoder`: 16 kHz mono in, one vector out):
- `StyleEncoder`: the IndexTTS-2 engine's own CAM++ speaker encoder (the engine's `style` stage), used when
  an engine is configured: the same network that will clone the voice decides who is who.
- `ResemblyzerEncoder`: Resemblyzer's GE2E encoder, whose pretrained weights ship inside its PyPI package
  (the `cast` extra), for machines with the draft voice only. Its own preprocessing (level normalisation,
  webrtcvad trimming of long pauses) runs first, as its authors use it.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable, Sequence
from importlib import metadata, util
from typing import Protocol

import numpy as np

from fasttts_cli.audio.load import db_to_gain
from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.errors import MissingDependencyError

EMBED_SR = 16000  # both encoders' input rate
# A cue quieter than this holds no voice to embed: speech in a film's dialogue sits around -30 to -20 dBFS
# RMS, a quiet line near -45; below -60 is room tone or a muted track, whose embedding is the encoder's
# reaction to nothing (or NaN, digital silence) and would make a speaker of its own.
SILENCE_DBFS = -60.0
CAST_HINT = "pip install 'fasttts-cli[cast]'  (resemblyzer, with torch==2.13.0), or configure an engine"


class SpeakerEncoder(Protocol):
    name: str

    def embed(self, audio_16k: np.ndarray) -> np.ndarray:
        """One speaker embedding (d,) of mono float32 audio at EMBED_SR."""
        ...


class StyleEncoder:
    """An engine's CAM++ `style` stage as a SpeakerEncoder."""

    def __init__(self, style: Callable[[np.ndarray], np.ndarray], name: str = "campplus") -> None:
        self._style = style
        self.name = name

    def embed(self, audio_16k: np.ndarray) -> np.ndarray:
        return np.asarray(self._style(np.asarray(audio_16k, dtype=np.float32)), dtype=np.float32).reshape(-1)


def _pkg_resources_for_webrtcvad() -> None:
    """webrtcvad 2.0.10 (Resemblyzer's VAD) reads its own version with `pkg_resources`, which setuptools
    81+ no longer ships: where it is missing, stand in the one call it makes, `get_distribution(name)
    .version`, answered by importlib.metadata. A real pkg_resources, where installed, is left alone."""
    if "pkg_resources" in sys.modules or util.find_spec("pkg_resources") is not None:
        return
    mod = types.ModuleType("pkg_resources")
    mod.get_distribution = lambda name: types.SimpleNamespace(version=metadata.version(name))  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = mod


class ResemblyzerEncoder:
    """Resemblyzer's bundled GE2E encoder on the CPU (a CUDA build of torch is never asked for)."""

    name = "resemblyzer"

    def __init__(self) -> None:
        _pkg_resources_for_webrtcvad()
        try:
            import torch
            from resemblyzer import VoiceEncoder, preprocess_wav
        except ImportError as e:
            raise MissingDependencyError(
                f"`fasttts cast` without an engine needs Resemblyzer ({e.name or e})", hint=CAST_HINT
            ) from None
        self._torch = torch
        self._pre = preprocess_wav
        self._enc = VoiceEncoder("cpu", verbose=False)

    def embed(self, audio_16k: np.ndarray) -> np.ndarray:
        x = np.asarray(audio_16k, dtype=np.float32)
        wav = self._pre(x, EMBED_SR)
        if len(wav) < EMBED_SR // 4:  # the VAD kept almost nothing: embed the cue as it is
            wav = x
        # One thread: the encoder is a small LSTM over 1.6 s windows, and torch's thread pool spinning on
        # a busy 2-core machine made 11 cues take 5-19 s instead of 1.6 s (measured, same run otherwise).
        threads = self._torch.get_num_threads()
        self._torch.set_num_threads(1)
        try:
            return np.asarray(self._enc.embed_utterance(wav), dtype=np.float32)
        finally:
            self._torch.set_num_threads(threads)


def cue_audio(audio: np.ndarray, sr: int, cue: Cue) -> np.ndarray:
    """The source audio under a timed cue."""
    assert cue.start is not None and cue.end is not None
    return audio[int(cue.start * sr) : int(np.ceil(cue.end * sr))]


def silent(audio: np.ndarray) -> bool:
    """No voice to embed: RMS under SILENCE_DBFS (digital silence, a muted track, a hiss floor)."""
    x = np.asarray(audio, dtype=np.float64)
    return len(x) == 0 or float(np.sqrt(np.mean(x * x))) < db_to_gain(SILENCE_DBFS)


def unheard_cues(audio_16k: np.ndarray, cues: Sequence[Cue]) -> dict[int, str]:
    """Position in `cues` -> why that cue has no audio to embed (past the audio's end, or silent)."""
    end = len(audio_16k) / EMBED_SR
    out: dict[int, str] = {}
    for k, cue in enumerate(cues):
        if cue.start is not None and cue.start >= end:
            out[k] = f"past the end of the audio ({end:.1f} s)"
        elif silent(cue_audio(audio_16k, EMBED_SR, cue)):
            out[k] = f"silent (under {SILENCE_DBFS:g} dBFS)"
    return out


def embed_cues(audio_16k: np.ndarray, cues: Sequence[Cue], encoder: SpeakerEncoder) -> np.ndarray:
    """(len(cues), d) L2-normalised embeddings of each timed cue's audio (cosine = dot product). A row
    the encoder could not make finite (audio it cannot read as a voice) is NaN: the caller sets it aside.
    The encoders' own numpy warnings on such audio (a log of zero energy) are theirs, not the user's."""
    rows = []
    for cue in cues:
        seg = cue_audio(audio_16k, EMBED_SR, cue)
        if len(seg) < EMBED_SR // 10:  # under 0.1 s (a cue ending past the audio): pad with silence
            seg = np.concatenate([seg, np.zeros(EMBED_SR // 10 - len(seg), np.float32)])
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            rows.append(encoder.embed(seg))
    emb = np.stack(rows).astype(np.float64)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        return emb / np.maximum(norms, 1e-12)
