"""Streaming a segment: audio leaves after its first chunk of codes, while the GPT is still generating.

The method. The GPT hands each one-beam line's codes on as it draws them (generate_loop's taps). Once a
chunk of codes is out (the preset's `stream.first_chunk_codes`, then `stream.chunk_codes` each), the
latent pass runs over every code so far (the trunk is causal: a prefix's latents are exactly the whole
line's; the generation's own hidden states are not, their mel positions are one apart), and s2mel and
the vocoder render a window: the chunk plus `stream.context_codes` codes before it, to exactly
F(end) - F(start) mel frames (F = the engine's natural frames of n codes, floor(1.72 n) for v2), so a
window's frames sit on the whole line's frame grid. The CFM start noise of a window is the same columns
of one line-long noise (drawn column by column, so a column never depends on the line's length), and
every window is conditioned on the voice's prompt as the whole line is. s2mel (a DiT over the whole
line) is not causal: a window's audio differs from the whole line's most at the window's edges, so the
first `context - overlap` codes of a window are rendered only as context and dropped, the last
`stream.overlap_codes` are held back, and the next window's audio over those is cross-faded in with a
Hann ramp (amplitude-complementary: the two renderings are of the same content and mostly in phase). A
streamed segment is exactly F(n) * hop samples long, like its whole rendering; with one chunk covering
it, it IS the whole rendering (tests/test_streaming.py measures both).

With beams > 1 (`stream.beams = 0` keeps decode.beams) a line's codes are final only when it ends:
its windows are rendered then (latents from the latent pass), so its first audio waits for the GPT.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fasttts_cli.spec.presets import S2MelOptions, StreamOptions

Emit = Callable[[np.ndarray], None]


def hann_fade(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(fade-in, fade-out) of n samples that sum to one at every sample."""
    w = (0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / max(n, 1))).astype(np.float32)
    return w, (1.0 - w).astype(np.float32)


def stream_noise(rng: np.random.Generator, n_mels: int, frames: int) -> np.ndarray:
    """(n_mels, frames) float32 ~ N(0, 1), drawn one frame (column) at a time: the first k columns are
    the same whatever `frames` is, so a window takes its columns of the line before its length is known."""
    return np.ascontiguousarray(rng.standard_normal((frames, n_mels), dtype=np.float32).T)


@dataclass
class SegmentStream:
    """One segment's streamer: `tap` as codes come (rendering each chunk as it completes), then `finish`
    with the segment's final codes. `emit(audio)` receives the audio in order; `lead` samples of silence
    go before the first (the gap after the previous segment of the line)."""

    engine: Any  # indextts2.stages.EngineStages
    voice: Any  # VoiceConditioning
    prefix: Any
    noise_rng: np.random.Generator
    s2mel: S2MelOptions
    opts: StreamOptions
    emit: Emit
    lead: int = 0
    cancelled: Callable[[], bool] = lambda: False
    codes: list[int] = field(default_factory=list)
    error: str | None = None
    stopped: bool = True  # the GPT ended on its stop code (False: max_tokens, or cancelled)
    first_audio_at_codes: int | None = None  # codes out when the first audio left (for measurement)
    _start: int = 0  # first code of the next chunk
    _emitted: int = 0  # samples of the segment emitted so far
    _tail: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    _noise: np.ndarray | None = None

    @property
    def hop(self) -> int:
        return int(self.engine.hop)

    def frames(self, n: int) -> int:
        return int(self.engine.target_lengths([n])[0]) if n > 0 else 0

    def _next_end(self) -> int:
        return self._start + (self.opts.first_chunk_codes if self._start == 0 else self.opts.chunk_codes)

    def tap(self, code: int) -> bool:
        """generate_loop's tap: keep the code; render a chunk when one is complete. False: stop the line
        (its listener left, or a chunk failed)."""
        self.codes.append(code)
        if self.cancelled() or self.error is not None:
            return False
        if len(self.codes) >= self._next_end():
            self._chunk(len(self.codes), final=False)
        return self.error is None

    def finish(self, codes: np.ndarray) -> None:
        """The segment's final codes (all of them, as the GPT returned them): render what is left."""
        codes = np.asarray(codes, np.int64).reshape(-1)
        if self.cancelled() or self.error is not None:
            return
        if list(codes) != self.codes:  # untapped (beams > 1): the codes came at the end
            self.codes = [int(c) for c in codes]
            self._start, self._emitted = 0, 0
            self._tail = np.zeros(0, np.float32)
        n = len(self.codes)
        while self._start < n and self.error is None:
            end = self._next_end()
            self._chunk(min(end, n), final=end >= n)
        if self.error is None and self._tail.size:
            self._out(self._tail)
            self._tail = np.zeros(0, np.float32)

    def _window_noise(self, lo: int, hi: int) -> np.ndarray:
        """The start noise of a window of mel frames [lo, hi): the prompt's columns and the window's."""
        tm = int(self.voice.ref_mel.shape[1])
        need = tm + hi
        if self._noise is None or self._noise.shape[1] < need:
            # drawn once for the longest line the engine makes (a column never depends on the count)
            cap = tm + self.frames(int(self.engine.max_codes))
            self._noise = stream_noise(self.noise_rng, int(self.engine.mel_params.n_mels), max(cap, need))
        return np.concatenate([self._noise[:, :tm], self._noise[:, tm + lo : tm + hi]], axis=1)

    def _chunk(self, end: int, *, final: bool) -> None:
        """Render codes [start - context, end), cross-fade over the held-back tail, emit, hold the next."""
        o = self.opts
        c0 = max(0, self._start - o.context_codes)
        lo, hi = self.frames(c0), self.frames(end)
        e = self.engine
        try:
            wav = e.codes_to_wavs(
                [self.voice],
                [self.prefix],
                [np.asarray(self.codes[c0:end], np.int64)],
                [self._window_noise(lo, hi)],
                steps=self.s2mel.steps,
                cfg_rate=self.s2mel.cfg_rate,
                schedule=self.s2mel.schedule,
                cache_level=self.s2mel.cache_level,
                frames=[hi - lo] if e.renders_to_length else None,
                latents=self._latents(c0, end),
            )[0]
        except Exception as ex:  # the line fails, its batch-mates go on
            self.error = f"{type(ex).__name__}: {ex}"
            return
        want = (hi - lo) * self.hop
        wav = np.asarray(wav, np.float32).reshape(-1)[:want]
        if wav.size < want:  # an engine that renders its natural length only: pad the frame it missed
            wav = np.concatenate([wav, np.zeros(want - wav.size, np.float32)])
        base = lo * self.hop  # the window's first sample in the segment
        out = []
        if self._tail.size:
            a = self._emitted - base
            fade_in, fade_out = hann_fade(self._tail.size)
            out.append(self._tail * fade_out + wav[a : a + self._tail.size] * fade_in)
        held = 0 if final else min(self.frames(o.overlap_codes) * self.hop, wav.size)
        start = self._emitted + self._tail.size - base
        out.append(wav[start : wav.size - held])
        self._tail = wav[wav.size - held :].copy()
        self._start = end
        if self.first_audio_at_codes is None:
            self.first_audio_at_codes = len(self.codes)
        self._out(np.concatenate(out))

    def _latents(self, lo: int, hi: int) -> list[np.ndarray] | None:
        """The window's latents: the latent pass over codes [0, hi), rows [lo, hi). None for an engine
        without a latent pass (2.5), whose s2mel takes the codes alone."""
        e = self.engine
        if not getattr(e, "latent_pass", True):
            return None
        lat = e.latent([self.prefix], [np.asarray(self.codes[:hi], np.int64)])[0]
        if hasattr(lat, "detach"):  # the torch backend's rows stay on its device
            return [lat[lo:hi]]
        return [np.asarray(lat, np.float32)[lo:hi]]

    def _out(self, audio: np.ndarray) -> None:
        if self.lead:
            self.emit(np.zeros(self.lead, np.float32))
            self.lead = 0
        self._emitted += audio.size
        if audio.size:
            self.emit(audio)


def whole_rendering(
    engine: Any,
    voice: Any,
    prefix: Any,
    codes: np.ndarray,
    noise_rng: np.random.Generator,
    s2mel: S2MelOptions,
) -> np.ndarray:
    """A segment's codes rendered whole with the start noise a stream draws (`stream_noise`): what a
    streamed segment is measured against (the tests, benchmarks/serve_bench.py), so that the distance is
    the chunking's alone."""
    n = int(np.asarray(codes).size)
    tm = int(voice.ref_mel.shape[1])
    z = stream_noise(noise_rng, int(engine.mel_params.n_mels), tm + int(engine.target_lengths([n])[0]))
    return engine.codes_to_wavs(
        [voice],
        [prefix],
        [np.asarray(codes, np.int64)],
        [z],
        steps=s2mel.steps,
        cfg_rate=s2mel.cfg_rate,
        schedule=s2mel.schedule,
        cache_level=s2mel.cache_level,
    )[0]
