"""The separation section of the torch GPU acceptance (tools/accept_torch.py): `--separate`'s htdemucs on
the device.

On CUDA: the real htdemucs architecture (published hyper-parameters, random weights: the timing does not
depend on the values) written in the published layout and loaded through demucs' loader, then 60 s of
48 kHz stereo separated block by block as a dub does (separation.stems, default block plan): one check with
the wall time per minute of audio, the CUDA peak memory and the host's peak RSS; then the stems against one
pass of Demucs over the whole input on the same device (block-by-block equals one pass away from TF32/
cuDNN rounding). --sim-cpu runs the same path with the small config on 3 s so CI covers the program.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

from fasttts_cli.tools.acceptance_table import Table

SECONDS = 60.0
SIM_SECONDS = 3.0
TOLERANCE = 1e-3  # of full scale: cuDNN picks algorithms per input length, TF32 may be on


def _source(path: Path, seconds: float) -> Path:
    import numpy as np
    import soundfile as sf

    sr = 48000
    t = np.arange(int(seconds * sr)) / sr
    x = np.stack([0.2 * np.sin(2 * np.pi * 220 * t), 0.2 * np.sin(2 * np.pi * 330 * t)])
    x += 0.05 * np.random.default_rng(0).standard_normal(x.shape)
    sf.write(path, x.T.astype(np.float32), sr, subtype="FLOAT")
    return path


def run_separation(table: Table, dev: Any, mode: str, work: Path) -> None:
    """Every separation check (see the module docstring) into `table`, under `work`."""
    import numpy as np
    import soundfile as sf
    import torch

    from fasttts_cli.separation import model as sepmodel
    from fasttts_cli.separation.stems import separate

    sim = mode == "sim"
    seconds = SIM_SECONDS if sim else SECONDS
    with table.timed("separation model (htdemucs, random weights)", mode) as d:
        files = sepmodel.build_random(work / "htdemucs", small=sim)
        model = sepmodel.load(files, str(dev))
        n_params = sum(p.numel() for p in model.parameters())
        d.append(f"{'small config' if sim else 'published hyper-parameters'}, {n_params:,} parameters")
    source = _source(work / "source.wav", seconds)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    with table.timed(f"separation {seconds:g} s on {dev.type}", mode) as d:
        t0 = time.perf_counter()
        stems = separate(source, work / "stems", files, model=model)
        dt = time.perf_counter() - t0
        d.append(f"{dt:.1f} s = {dt / seconds * 60:.1f} s per minute of audio")
        if dev.type == "cuda":
            d.append(f"CUDA peak {torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB")
        d.append(f"host peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    with table.timed("separation blocks == one pass", mode) as d:
        from demucs.apply import apply_model

        from fasttts_cli.audio.load import AudioReader

        with AudioReader(source, model.samplerate) as r:
            x = r.read(1 << 30)
        with torch.no_grad():
            out = apply_model(model, torch.from_numpy(x)[None].to(dev), shifts=0, split=True, overlap=0.25)
        out = out[0].float().cpu().numpy()
        voc = list(model.sources).index(sepmodel.DIALOGUE_SOURCE)
        got, _ = sf.read(stems.dialogue, dtype="float32", always_2d=True)
        err = float(np.abs(got.T - out[voc]).max())
        d.append(f"dialogue max |diff| {err:.2e} (tolerance {TOLERANCE:g})")
        if not err <= TOLERANCE:
            raise AssertionError(f"block-by-block differs from one pass by {err:.2e}")
