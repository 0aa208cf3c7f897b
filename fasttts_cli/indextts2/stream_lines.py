"""`stream` of the IndexTTS-2 / 2.5 synthesizers: lines whose audio leaves chunk by chunk.

A batch of lines streams together: the GPT steps every line's current segment at once (one GPT batch,
the same per-segment generators as `plan`, so a line's codes do not depend on its batch-mates), and each
line's `SegmentStream` renders its chunks as its codes come (indextts2.streaming says how). A line's
segments follow one another (segment k+1's GPT runs after segment k is out), joined by the same 200 ms
gap as a whole rendering. What a line says is what `plan` would make it say with the preset's
`stream.beams`; its audio is a chunked rendering of those codes (same length, small differences at the
joins: the CFM start noise is drawn column-wise for streaming, so it is not the whole rendering's).

A streamed line is rendered at its natural length only: a target length is split over a line's
segments from their natural lengths, known only once every segment's codes are out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from fasttts_cli.indextts2.engine import noise_generator, segment_seed_generator
from fasttts_cli.indextts2.streaming import SegmentStream
from fasttts_cli.synth import synthesizer as contract

Cancelled = Callable[[int], bool]


class LineStreaming:
    """The `stream` method of IndexTTS2Synthesizer (a mixin: the synthesizer module is full)."""

    engine: Any
    sample_rate: int
    _gap: int
    _line_segments: Callable[..., tuple[dict[int, list[Any]], dict[int, str]]]

    def stream(
        self,
        requests: Sequence[contract.SynthRequest],
        on_audio: contract.AudioCallback,
        *,
        cancelled: Cancelled | None = None,
    ) -> list[contract.SynthResult]:
        """Each line's audio as it is made: `on_audio(k, samples)` in order per line (float32 at
        `sample_rate`); then one result per request with the whole audio, or the reason it failed.
        `cancelled(k)` true: line k's listener left; its GPT rows stop at the next step."""
        e = self.engine
        so = e.preset.stream
        if so.beams:
            requests = [replace(r, options={**r.options, "beams": so.beams}) for r in requests]
        mine, errors = self._line_segments(requests)
        audio: dict[int, list[np.ndarray]] = {i: [] for i in range(len(requests))}
        streams: dict[int, list[SegmentStream]] = {i: [] for i in range(len(requests))}
        gone = cancelled or (lambda k: False)

        def emitter(i: int) -> Callable[[np.ndarray], None]:
            def emit(a: np.ndarray) -> None:
                audio[i].append(a)
                contract.deliver(on_audio, i, a)

            return emit

        rounds = max((len(p) for p in mine.values()), default=0)
        for j in range(rounds):
            batch = []
            for i, parts in mine.items():
                if i in errors or j >= len(parts) or any(s.error for s in streams[i]) or gone(i):
                    continue
                s = parts[j]
                st = SegmentStream(
                    e,
                    s.voice,
                    s.prefix,
                    noise_generator(s.seed, s.index),
                    s.s2mel,
                    so,
                    emitter(i),
                    lead=self._gap if j else 0,
                    cancelled=lambda i=i: gone(i),  # type: ignore[misc]
                )
                streams[i].append(st)
                batch.append((s, st))
            if batch:
                self._stream_batch(batch)
        return [self._streamed(r, i, errors.get(i), streams[i], audio[i]) for i, r in enumerate(requests)]

    def _stream_batch(self, batch: list[tuple[Any, SegmentStream]]) -> None:
        """One GPT batch of segments with taps; a failing call is re-run segment by segment (a segment
        that already sent audio cannot be re-run: it fails)."""
        try:
            decoded = self.engine.generate(
                [s.prefix for s, _ in batch],
                [s.params for s, _ in batch],
                [segment_seed_generator(s.seed, s.index) for s, _ in batch],
                taps=[st.tap for _, st in batch],
            )
        except Exception as ex:
            msg = f"{type(ex).__name__}: {ex}"
            for s, st in batch:
                if len(batch) == 1 or st.first_audio_at_codes is not None:
                    st.error = msg
                else:
                    st.codes.clear()
                    st.hidden.clear()
                    self._stream_batch([(s, st)])
            return
        for (_, st), d in zip(batch, decoded, strict=True):
            st.stopped = bool(d.stopped)
            if d.codes.size == 0 and not st.cancelled():
                st.error = "the model generated no speech codes (stop token first)"
            else:
                st.finish(d.codes)

    def _streamed(
        self,
        r: contract.SynthRequest,
        i: int,
        error: str | None,
        parts: list[SegmentStream],
        audio: list[np.ndarray],
    ) -> contract.SynthResult:
        for k, st in enumerate(parts):
            if st.error is not None:
                error = error or f"segment {k + 1} of {len(parts)}: {st.error}"
        if error is not None or not audio:
            return contract.SynthResult(r.line_id, None, self.sample_rate, error=error or "no audio")
        return contract.SynthResult(
            r.line_id,
            np.concatenate(audio).astype(np.float32),
            self.sample_rate,
            n_tokens=sum(len(st.codes) for st in parts),
            hit_token_limit=any(not st.stopped for st in parts),
        )
