"""A source's dialogue and music-and-effects stems: separated once, block by block, resumable, cached.

`separate(source, root, files)` returns the two stem files for `source` under `root/<content>-<model>/`:

- the folder is named by the source's content (sha256, memoised by path, size and mtime in
  `root/sources.json`, so a 2-hour film is hashed once) and the model's digest (bag yaml + weights), so a
  re-run, a retake or another dub of the same video finds the stems and never loads the model;
- the source is decoded block by block (audio.load.AudioReader: ffmpeg or libsndfile, resampled once to the
  model's rate, more than two channels downmixed to stereo with the ITU coefficients, LFE dropped), each
  block fed to Demucs with its context (blocks.py) and its stems saved as `blocks/<k>.npy` (a temporary
  name, renamed when complete). An interrupted separation restarts at the first block it does not have;
- when every block is there, the stems are cross-faded into `dialogue.flac` (the `vocals` source) and
  `background.flac` (the sum of the others), 24-bit at the model's rate, each written to a temporary name and
  renamed; `stems.json` last, which is what marks the folder complete; the block files are then removed.

Memory stays at a block (by default 20 strides, 117 s for htdemucs, plus 12 s of context each side)
whatever the length: the decoded window, Demucs' four-source output for it, and the model.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.dubbing.cache import atomic_write, atomic_write_json
from fasttts_cli.errors import InputError
from fasttts_cli.separation.blocks import BlockPlan, assemble, plan_blocks
from fasttts_cli.separation.model import DIALOGUE_SOURCE, ModelFiles, load, segment_seconds

FORMAT_VERSION = 1
OVERLAP = 0.25  # Demucs' own default overlap between its segments
BLOCK_STRIDES = 20  # segments strides per block
FADE_SECONDS = 0.5  # cross-fade half-width at a block boundary
STEM_NAMES = ("dialogue", "background")
# ffmpeg's 5.1 order FL FR FC LFE (B|S)L (B|S)R -> stereo: L = FL + c*FC + c*SL, R = FR + c*FC + c*SR
_C = 0.7071
_DOWNMIX_51 = np.array([[1, 0, _C, 0, _C, 0], [0, 1, _C, 0, 0, _C]], dtype=np.float32)

Progress = Callable[[int, int], None]  # (blocks done, blocks in all)


@dataclass(frozen=True)
class Stems:
    dialogue: Path
    background: Path
    folder: Path
    cached: bool  # found complete: the model did not run
    computed: int  # blocks separated in this run
    reused: int  # blocks an earlier, interrupted run had finished
    seconds: float  # source length

    def to_json(self) -> dict[str, Any]:
        return {
            "dialogue": str(self.dialogue),
            "background": str(self.background),
            "folder": str(self.folder),
            "cached": self.cached,
            "blocks_computed": self.computed,
            "blocks_reused": self.reused,
            "seconds": round(self.seconds, 3),
        }


def source_sha256(source: Path, root: Path) -> str:
    """The source's content hash, memoised in `root/sources.json` under its path, size and mtime."""
    from fasttts_cli.spec.engine_folder import file_sha256

    st = source.stat()
    key = f"{source.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo_path = root / "sources.json"
    memo: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
    if key not in memo:
        memo[key] = file_sha256(source)
        with contextlib.suppress(OSError):  # a memo that cannot be written only costs a re-hash
            atomic_write_json(memo_path, memo)
    return memo[key]


def stems_folder(source: Path, root: Path, files: ModelFiles) -> Path:
    return root / f"{source_sha256(source, root)[:16]}-{files.name}-{files.digest()[:12]}"


def cached_stems(folder: Path) -> Stems | None:
    try:
        meta = json.loads((folder / "stems.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    paths = [folder / f"{name}.flac" for name in STEM_NAMES]
    if meta.get("format_version") != FORMAT_VERSION or not all(p.is_file() for p in paths):
        return None
    return Stems(paths[0], paths[1], folder, True, 0, 0, float(meta.get("seconds", 0.0)))


def separate(
    source: Path,
    root: Path,
    files: ModelFiles,
    *,
    progress: Progress | None = None,
    device: str | None = None,
    strides: int = BLOCK_STRIDES,
    model: Any = None,
) -> Stems:
    """The stems of `source` (see the module doc). `model`: an already loaded one (else loaded here, and
    only when something is left to separate)."""
    from filelock import FileLock

    from fasttts_cli.partials import sweep_partials

    root.mkdir(parents=True, exist_ok=True)
    folder = stems_folder(source, root, files)
    found = cached_stems(folder)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    # One separating process per stems folder (a dub and a `fasttts cast` of the same video).
    with FileLock(str(folder / ".lock")):
        found = cached_stems(folder)
        if found is not None:
            return found
        blocks = folder / "blocks"
        blocks.mkdir(exist_ok=True)
        sweep_partials(folder)
        sweep_partials(blocks)
        owned = model is None
        if model is None:
            model = load(files, device)
        run = _Run(source, folder, model, strides)
        run.check_layout(blocks)
        computed, reused, n = run.blocks(blocks, progress)
        if owned:  # the dub's TTS engine loads next: give the GPU memory back
            run.model = model = None
            _release_gpu()
        return run.finish(blocks, n, computed, reused)


def _release_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Run:
    def __init__(self, source: Path, folder: Path, model: Any, strides: int) -> None:
        self.source, self.folder, self.model = source, folder, model
        self.sr = int(model.samplerate)
        self.segment = int(self.sr * segment_seconds(model))
        self.plan: BlockPlan = plan_blocks(
            self.segment, OVERLAP, strides=strides, fade=round(FADE_SECONDS * self.sr)
        )
        sources = list(model.sources)
        if DIALOGUE_SOURCE not in sources:
            raise InputError(
                self.folder, f"the separation model has no {DIALOGUE_SOURCE!r} source: {sources}"
            )
        self.voc = sources.index(DIALOGUE_SOURCE)

    def check_layout(self, blocks: Path) -> None:
        """Blocks an interrupted run left are reused only if cut the same way: else start over."""
        layout = {"format_version": FORMAT_VERSION, "sample_rate": self.sr, **self.plan.to_json()}
        path = blocks / "layout.json"
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text(encoding="utf-8")) == layout:
                return
        for p in blocks.glob("*.npy"):
            p.unlink()
        atomic_write_json(path, layout)

    def blocks(self, blocks: Path, progress: Progress | None) -> tuple[int, int, int]:
        """Separate every block not yet on disk; (computed, reused, source frames)."""
        from fasttts_cli.audio.load import AudioReader
        from fasttts_cli.media.probe import probe

        plan = self.plan
        duration = probe(self.source).duration
        guess = max(1, plan.count(round(duration * self.sr))) if duration > 0 else 1
        computed = reused = 0
        buf = np.zeros((2, 0), np.float32)
        buf_start = 0  # source frame of buf[:, 0]
        eof = False
        k = 0
        with AudioReader(self.source, self.sr) as reader:
            while True:
                s = k * plan.block
                want = s + plan.block + plan.context  # frames the model needs for block k
                while not eof and buf_start + buf.shape[1] < want:
                    got = reader.read(1 << 18)
                    if got.shape[1] == 0:
                        eof = True
                        break
                    buf = np.concatenate([buf, _stereo(got, self.source)], axis=1)
                n_known = buf_start + buf.shape[1]
                if s >= n_known:
                    break
                n = n_known if eof else max(want, n_known) + 1  # only the last block needs n exactly
                path = blocks / f"{k:05d}.npy"
                if path.is_file():
                    reused += 1
                else:
                    a, b = plan.model_input(k, n)
                    stems = self._separate(buf[:, a - buf_start : b - buf_start])
                    sa, sb = plan.stored(k, n)
                    part = np.ascontiguousarray(stems[..., sa - a : sb - a])
                    atomic_write(path, lambda f, p=part: np.save(f, p))
                    computed += 1
                if progress is not None:
                    last = eof and s + plan.block >= n_known
                    guess = k + 1 if last else max(guess, k + 2)
                    progress(k + 1, guess)
                # What block k+1 needs on its left (never past the data: the end must stay known).
                keep_from = min((k + 1) * plan.block - plan.context, n_known)
                if keep_from > buf_start:
                    buf = buf[:, keep_from - buf_start :]
                    buf_start = keep_from
                k += 1
        if n_known == 0:
            raise InputError(self.source, "holds no audio samples to separate")
        return computed, reused, n_known

    def _separate(self, x: np.ndarray) -> np.ndarray:
        """Demucs over a window: `(2 stems, 2 channels, m)` float32 (dialogue, music and effects)."""
        import torch
        from demucs.apply import apply_model

        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = apply_model(
                self.model, torch.from_numpy(x)[None], shifts=0, split=True, overlap=OVERLAP, device=device
            )[0]
        out = out.to("cpu", torch.float32).numpy()
        dialogue = out[self.voc]
        background = out.sum(axis=0) - dialogue  # drums + bass + other, in float64-free float32 order
        return np.stack([dialogue, background]).astype(np.float32, copy=False)

    def finish(self, blocks: Path, n: int, computed: int, reused: int) -> Stems:
        from fasttts_cli.audio.blockio import AudioFileWriter

        plan = self.plan
        finals = [self.folder / f"{name}.flac" for name in STEM_NAMES]
        loaded: dict[int, np.ndarray] = {}

        def read(j: int) -> np.ndarray:
            if j not in loaded:
                loaded[j] = np.load(blocks / f"{j:05d}.npy")
                for old in [i for i in loaded if i < j - 1]:
                    del loaded[old]
            return loaded[j]

        writers = [AudioFileWriter(p, self.sr, 2) for p in finals]
        try:
            for k in range(plan.count(n)):
                _, out = assemble(plan, n, k, read)
                for w, stem in zip(writers, out, strict=True):
                    w.write(stem)
            for w in writers:
                w.commit()
        except BaseException:
            for w in writers:
                w.abort()
            raise
        meta = {
            "format_version": FORMAT_VERSION,
            "source": str(self.source),
            "sample_rate": self.sr,
            "frames": n,
            "seconds": n / self.sr,
            "stems": {"dialogue": DIALOGUE_SOURCE, "background": "the other sources, summed"},
            "blocks": plan.to_json(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        atomic_write_json(self.folder / "stems.json", meta)
        for p in blocks.iterdir():
            with contextlib.suppress(OSError):
                p.unlink()
        with contextlib.suppress(OSError):
            os.rmdir(blocks)
        return Stems(finals[0], finals[1], self.folder, False, computed, reused, n / self.sr)


def _stereo(x: np.ndarray, source: Path) -> np.ndarray:
    """Two channels for the model: mono doubled, 5.1 downmixed (ITU), stereo as is."""
    if x.shape[0] == 2:
        return x
    if x.shape[0] == 1:
        return np.repeat(x, 2, axis=0)
    if x.shape[0] == 6:
        return (_DOWNMIX_51 @ x).astype(np.float32) / (1 + 2 * _C)
    raise InputError(source, f"{x.shape[0]}-channel audio: separation takes mono, stereo or 5.1")
