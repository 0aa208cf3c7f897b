"""The stage API every IndexTTS-2 backend implements, as Protocols (the GPT step protocol is protocol.py's).

`VoiceStages` is what one voice's conditioning needs from a backend: the networks of stages 1.2-1.7 and
3.1-3.2, each taking and returning numpy arrays. `indextts2.voice.VoiceFlow` chains them once for every
backend (ONNX Runtime / TensorRT sessions in `IndexTTS2Engine`, PyTorch modules in `TorchEngine`).
`EngineStages` is the whole surface the synthesizer and the bench drive. Both engines are checked
against these in tests (tests/test_backend_registry.py), so a member missing on one fails there, not
in the middle of a dub.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from fasttts_cli.indextts2.emotion import EmotionMatrices
    from fasttts_cli.indextts2.features import MelParams, SpeakerAudio
    from fasttts_cli.indextts2.voice import VoiceConditioning
    from fasttts_cli.spec.presets import Preset


@dataclass
class StageTimes:
    """Wall time per stage (seconds, summed over calls) and call counts; the bench reads these. Stages
    that run side by side (a voice's two chains) each count their own wall time."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def time(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            with self._lock:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + dt
                self.calls[stage] = self.calls.get(stage, 0) + 1

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


@runtime_checkable
class VoiceStages(Protocol):
    """The per-voice networks (stage numbers as in tools/parity2/README.md)."""

    times: StageTimes
    preset: Preset
    mel_params: MelParams

    @property
    def emotion_matrices(self) -> EmotionMatrices: ...

    @property
    def voice_chains_side_by_side(self) -> bool:
        """Whether the speaker and emotion chains may run on two threads at once."""
        ...

    def w2v_bert(self, audio_16k: np.ndarray) -> np.ndarray:
        """1.2-1.3: 16 kHz audio -> (T, 1024) normalised layer-17 features."""
        ...

    def codec_quantize(self, spk_cond_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """1.4: (T, 1024) -> (codes (T,), S_ref (T, 1024))."""
        ...

    def style(self, audio_16k: np.ndarray) -> np.ndarray:
        """1.6: CAMPPlus style (style_dim,)."""
        ...

    def length_regulator(self, x: np.ndarray, y_len: int) -> np.ndarray:
        """1.7: S_ref (T, 1024) -> prompt condition (y_len, C)."""
        ...

    def speaker_conditioning(self, spk_cond_emb: np.ndarray) -> np.ndarray:
        """3.2: (T, 1024) -> speaker latents (num_latents, D)."""
        ...

    def emovec_of(self, cond_emb: np.ndarray) -> np.ndarray:
        """get_emovec: (T, 1024) -> (D,)."""
        ...


@runtime_checkable
class EngineStages(Protocol):
    """What `IndexTTS2Synthesizer` and the bench drive, on any backend."""

    times: StageTimes
    preset: Preset
    sample_rate: int
    hop: int
    tokens: Any  # decode.GPTTokens

    @property
    def text(self) -> Any: ...

    @property
    def max_codes(self) -> int: ...

    @property
    def renders_to_length(self) -> bool:
        """Whether `codes_to_wavs(frames=)` renders rows to given lengths (an old engine folder cannot)."""
        ...

    def identity(self) -> str: ...

    def close(self) -> None: ...

    def speaker_audio(self, path: Path | str) -> SpeakerAudio: ...

    def emotion_audio(self, path: Path | str) -> np.ndarray: ...

    def voice_conditioning(
        self,
        speaker: SpeakerAudio,
        emotion_16k: np.ndarray,
        *,
        alpha: float = 1.0,
        vector: Sequence[float] | None = None,
    ) -> VoiceConditioning: ...

    def prefix(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> Any: ...

    def generate(self, prefixes: Sequence[Any], params: Any, generators: Sequence[Any]) -> list[Any]: ...

    def latent(self, prefixes: Sequence[Any], codes: Sequence[np.ndarray]) -> list[Any]: ...

    def target_lengths(self, code_lens: Sequence[int]) -> np.ndarray:
        """The natural mel frames of rows of n codes (floor(1.72 n)); hop samples each."""
        ...

    def codes_to_wavs(self, voices: Sequence[VoiceConditioning], *rows: Sequence, **cfm: Any) -> list[Any]:
        """Latent pass, s2mel and vocoder: rows = (prefixes, codes, CFM start noises); cfm = the run's
        steps / cfg_rate / schedule / cache_level, and `frames` (per row mel frames, None: natural)."""
        ...
