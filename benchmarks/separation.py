"""Time and peak memory of `--separate`'s block-by-block separation, in one process:

    python benchmarks/separation.py --seconds 150 [--threads 1] [--work DIR]          # htdemucs, real size
    python benchmarks/separation.py --seconds 1800 --channels 6 --stub                # streaming alone

Default: the real htdemucs architecture (published hyper-parameters, random weights: the cost does not depend
on the values) written in the published layout and loaded through demucs' loader, over `--seconds` of a
48 kHz tone-and-noise source, with the dub's default block plan. `--stub` replaces the model by a trivial
split (half the input in each stem) at htdemucs' geometry, to measure what the streaming itself holds
(decode, block files, cross-fades, FLAC stems) on long inputs. Prints the wall time, the time per minute of
audio and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _source(path: Path, seconds: float, channels: int) -> Path:
    from fasttts_cli.media.ffmpeg import run_ffmpeg

    layout = {1: "mono", 2: "stereo", 6: "5.1"}[channels]
    expr = "|".join(f"0.2*sin({220 + 40 * c}*2*PI*t)+0.05*(random(0)-0.5)" for c in range(channels))
    src = f"aevalsrc={expr}:s=48000:c={layout}:d={seconds}"
    run_ffmpeg(["-f", "lavfi", "-i", src, "-c:a", "flac", str(path)], what="benchmark source")
    return path


class _Stub:
    """What separation.stems reads of a model, at htdemucs' geometry."""

    samplerate = 44100
    sources = ("drums", "bass", "other", "vocals")
    segment = 7.8

    def parameters(self):
        import torch

        yield torch.zeros(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--channels", type=int, default=2, choices=(1, 2, 6))
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--stub", action="store_true", help="a trivial split instead of the model")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    a = ap.parse_args()
    import torch

    from fasttts_cli.separation import model as sepmodel
    from fasttts_cli.separation import stems as sepstems

    if a.threads:
        torch.set_num_threads(a.threads)
    work = a.work or Path(tempfile.mkdtemp(prefix="fasttts-sep-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    source = _source(work / f"source-{a.channels}ch.flac", a.seconds, a.channels)
    if a.stub:
        sepstems._Run._separate = lambda self, x: np.stack([0.5 * x, 0.5 * x]).astype(np.float32)
        folder = work / "stub-model"
        folder.mkdir(exist_ok=True)
        (folder / "htdemucs.yaml").write_text("models: ['stub']\n")
        (folder / "stub.th").write_bytes(b"stub")
        files, model = sepmodel.locate(folder), _Stub()
    else:
        files = sepmodel.build_random(work / "htdemucs")
        model = sepmodel.load(files)
    shutil.rmtree(work / "stems", ignore_errors=True)
    before = _rss_mb()
    t0 = time.perf_counter()
    stems = sepstems.separate(
        source,
        work / "stems",
        files,
        model=model,
        progress=lambda k, n: print(f"block {k}/{n} at {time.perf_counter() - t0:.0f} s", flush=True),
    )
    dt = time.perf_counter() - t0
    what = "stub split" if a.stub else f"htdemucs on {next(model.parameters()).device}"
    print(
        f"{what}: {a.seconds:g} s of 48 kHz {a.channels}-channel audio in {dt:.1f} s "
        f"= {dt / a.seconds * 60:.1f} s per minute; {stems.computed} blocks; "
        f"peak RSS {_rss_mb():.0f} MB ({before:.0f} MB before separating)"
    )


if __name__ == "__main__":
    main()
