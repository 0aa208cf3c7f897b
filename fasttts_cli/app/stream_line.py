"""`fasttts synth --stream`: one line written as it is made.

`-o -` writes to stdout: a WAV with a streaming header (sizes 0xFFFFFFFF: "until the end") or, with
`--pcm`, raw 16-bit little-endian mono PCM at the engine's rate. `-o FILE` (.wav; .pcm/.raw with --pcm)
grows as the audio comes and gets its real WAV sizes when the line ends; a line that fails or is
interrupted removes the file, so a file under the name is a finished line or one still growing. The line
streams at its natural length (synth.synthesizer's `stream`; the draft voice sentence by sentence), so
--duration is refused (exit 2), and a failed line cannot be retried once audio has left: retries happen
only while nothing is written (a retry draws another seed, as synth's own retries do).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fasttts_cli.app.job import check_writable
from fasttts_cli.app.progress import Reporter
from fasttts_cli.app.single_line import SynthOptions, checked_text, line_voice, open_line_engine, synth_result
from fasttts_cli.app.synthesis import seed_of
from fasttts_cli.audio.wavstream import WavStreamWriter
from fasttts_cli.errors import SynthesisError, UsageError
from fasttts_cli.synth.synthesizer import Synthesizer, SynthRequest, stream_rows

STDOUT = Path("-")
FILE_EXTS = (".wav",)
PCM_EXTS = (".pcm", ".raw")


def stream_one(so: SynthOptions, rep: Reporter, *, synthesizer: Synthesizer | None = None) -> dict[str, Any]:
    """Speak the line, writing its audio as it comes (module docstring); the result says when the first
    audio left (`first_audio_s`, from the start of synthesis: the engine and voice are loaded) and RTF."""
    text = checked_text(so)
    if so.duration is not None:
        raise UsageError(
            "--duration with --stream: a streamed line is spoken at its natural length (a target length is "
            "split over the line's segments, known only once all of them are generated)",
            hint="drop --stream to render to a length",
        )
    to_stdout = so.output == STDOUT
    if not to_stdout:
        exts = PCM_EXTS if so.pcm else FILE_EXTS
        if so.output.suffix.lower() not in exts:
            raise UsageError(
                f"-o/--output {so.output}: with --stream{' --pcm' if so.pcm else ''} the extension must be "
                f"one of {', '.join(exts)}",
                hint="or -o - for stdout",
            )
        check_writable(so.output.parent if str(so.output.parent) else Path("."), "-o/--output")
    selection, synth = open_line_engine(so, rep, synthesizer)
    try:
        voice, lang, seed = line_voice(so, synth, rep, text)
        sr = int(synth.sample_rate)
        with _sink(so.output) as out, rep.stage("synthesize"):
            writer = WavStreamWriter(out, sr, header=not so.pcm)
            t0 = time.monotonic()
            first: list[float] = []

            def on_audio(k: int, a: np.ndarray) -> None:
                if not first:
                    first.append(time.monotonic() - t0)
                writer.write(a)

            retries, res = 0, None
            while True:
                req = SynthRequest("1", text, voice, seed_of(seed, retries), lang=lang)
                res = stream_rows(synth, [req], on_audio)[0]
                if res.ok or first or retries >= so.max_retries:
                    break
                retries += 1
            if not res.ok:
                msg = f"synthesis failed after {retries} retries: {res.error or 'no audio'}"
                if so.on_line_failure == "fail" or first:
                    raise SynthesisError(msg)
                rep.warn(f"{msg} (left silent)")
                from fasttts_cli.app.inspection import forecast_duration

                writer.write(np.zeros(round(forecast_duration(text) * sr), np.float32))
            writer.close()
            total = time.monotonic() - t0
        dur = writer.data_bytes / 2 / sr
        return synth_result(
            so,
            selection,
            synth,
            rep,
            stream=True,
            format="pcm" if so.pcm else "wav",
            duration=round(dur, 3),
            samples=writer.data_bytes // 2,
            sample_rate=sr,
            seed=seed,
            retries=retries,
            failed=not res.ok,
            error=None if res.ok else res.error,
            first_audio_s=round(first[0], 4) if first else None,
            rtf=round(total / dur, 4) if dur else None,
        )
    finally:
        if synthesizer is None:
            synth.close()


@contextlib.contextmanager
def _sink(output: Path) -> Any:
    """stdout's bytes, or the file opened to grow; the file is removed if the line does not finish."""
    if output == STDOUT:
        yield sys.stdout.buffer
        return
    f: BinaryIO = open(output, "wb")  # noqa: SIM115 - closed below, removed on failure
    try:
        yield f
    except BaseException:
        f.close()
        with contextlib.suppress(OSError):
            output.unlink()
        raise
    f.close()
