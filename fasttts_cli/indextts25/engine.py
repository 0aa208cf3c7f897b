"""IndexTTS-2.5 engine: v2's stage API over a 2.5 engine folder (numpy + ONNX Runtime, never torch).

What 2.5 changes (delta §0, §3-§5), each on the v2 engine's own seams so the rest (sessions, the one
generate loop, CFM, vocoder, the voice flow's emotion paths) is IndexTTS2Engine's:

- voice: the speaker is one row, `spk_emb_proj(style)` (CAM++), applied on the host; the prompt
  condition is the length regulator on the continuous w2v-BERT features (no codec quantizer);
- prefix (stage 3.4): [spk_row + emovec | 0 | 0 | text rows + the language row]. The original left-pads
  the prefix with one zero, masked row per stripped start/stop id (the trailing 1 at least); masked rows
  are invisible to the trunk (it has no position embedding: positions are host-side, mel only), so they
  are left out here, which is exactly what the batch's own left padding does;
- no latent pass; codes (25 Hz) -> `codec_decode` -> S_infer (2n frames, 50 Hz) -> length regulator to
  int(2n * 1.72) mel frames (or the frames a render asks for) -> CFM -> BigVGAN.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.onnxruntime.session import SessionOptions
from fasttts_cli.errors import EngineMismatchError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import features as feat
from fasttts_cli.indextts2.components import LENGTH_REGULATOR
from fasttts_cli.indextts2.engine import IndexTTS2Engine, _pad_stack
from fasttts_cli.indextts2.folder_sessions import FolderSessions
from fasttts_cli.indextts25.components import (
    CODEC_DECODE,
    COMPONENTS25,
    MODEL_ID25,
    SPK_PROJ_BIAS,
    SPK_PROJ_WEIGHT,
    TABLES25,
    TOKENIZER,
    check_manifest25,
    io_matches25,
)
from fasttts_cli.spec.engine_folder import Manifest
from fasttts_cli.spec.presets import Preset

MAX_SEGMENT_TOKENS = 120  # infer_v2_5's max_text_tokens_per_segment default


class FolderSessions25(FolderSessions):
    """FolderSessions with 2.5's component set and IO check."""

    def open_all(self) -> None:
        for name in COMPONENTS25:
            self.get(name)

    def _check_io(self, name: str, s: Any) -> None:
        have_in, have_out = {i.name for i in s.inputs}, {o.name for o in s.outputs}
        if not io_matches25(name, self.layers, have_in, have_out):
            raise EngineMismatchError(
                f"{self.folder / self.manifest.components[name].file}: component {name!r} has inputs "
                f"{sorted(have_in)} and outputs {sorted(have_out)}, which this runtime does not drive",
                hint="rebuild the engine with this version of `fasttts build`",
            )


def load_text_front_end25(folder: Path, manifest: Manifest) -> Any:
    """The 2.5 text front end from the engine folder alone (the tiktoken file and config.gpt)."""
    from fasttts_cli.indextts25.text import TextFrontEnd25

    return TextFrontEnd25.load(folder / manifest.files[TOKENIZER], manifest.config["gpt"])


class IndexTTS25Engine(IndexTTS2Engine):
    """The 2.5 stage API over one engine folder (see the module docstring)."""

    def __init__(
        self, folder: Path, manifest: Manifest, preset: Preset, options: SessionOptions | None = None
    ) -> None:
        super().__init__(folder, manifest, preset, options)
        self.sessions = FolderSessions25(folder, manifest, self.options)
        self.code_upsample = int(manifest.config["s2mel"].get("code_upsample", 2))
        self._spk_proj: tuple[np.ndarray, np.ndarray] | None = None
        self._lang: np.ndarray | None = None

    model_id = MODEL_ID25

    @staticmethod
    def check(manifest: Manifest, folder: Path) -> None:
        check_manifest25(manifest, folder)

    @property
    def text(self) -> Any:
        """The TextFrontEnd25 (tiktoken + per-language chain + segmenter)."""
        if self._text is None:
            self._text = load_text_front_end25(self.folder, self.manifest)
        return self._text

    @property
    def max_text_tokens(self) -> int:
        """The segment budget infer_v2_5 uses (120), capped by the preset's limit."""
        return min(MAX_SEGMENT_TOKENS, int(self.preset.limits.max_text_tokens))

    def _table(self, key: str) -> np.ndarray:
        return np.load(self.folder / self.manifest.files[key], allow_pickle=False).astype(np.float32)

    @property
    def embeddings(self) -> dec.HostEmbeddings:
        """v2's host tables; the two zero slots after the speaker row are v2's speed rows set to zero,
        so HostEmbeddings.conds_latent makes 2.5's [spk + emovec | 0 | 0]."""
        if self._emb is None:
            t = {k: self._table(f) for k, f in TABLES25.items() if k != "lang_embedding"}
            speed = np.zeros((2, t["mel_embedding"].shape[1]), np.float32)
            self._emb = dec.HostEmbeddings(**t, speed=speed, tokens=self.tokens)
        return self._emb

    @property
    def lang_embedding(self) -> np.ndarray:
        if self._lang is None:
            self._lang = self._table(TABLES25["lang_embedding"])
        return self._lang

    def speaker_vector(self, style: np.ndarray) -> np.ndarray:
        """Stage 3.2 for 2.5: spk_emb_proj(style) -> (1, D), the one speaker row."""
        if self._spk_proj is None:
            self._spk_proj = (self._table(SPK_PROJ_WEIGHT), self._table(SPK_PROJ_BIAS))
        w, b = self._spk_proj
        return (np.asarray(style, np.float32).reshape(1, -1) @ w.T + b).astype(np.float32)

    # ------------------------------------------------------------------------------- voice

    def _prompt_features(
        self, audio: feat.SpeakerAudio, spk_cond_emb: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(spk_cond_emb, ref_mel, prompt_condition): 2.5 stretches the continuous features."""
        with self.times.time("speaker_features"):
            mel = self.ref_mel(audio.audio_22k)
            return spk_cond_emb, mel, self.length_regulator(spk_cond_emb, mel.shape[1])

    def _speaker_latents(self, spk_cond_emb: np.ndarray) -> np.ndarray | None:
        return None  # no speaker conditioner: the row is the style's (`_speaker_rows`)

    def _speaker_rows(self, latents: np.ndarray | None, style: np.ndarray) -> np.ndarray:
        return self.speaker_vector(style)

    # ------------------------------------------------------------------------------- GPT

    def prefix25(
        self, spk_row: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int], lang_index: int
    ) -> np.ndarray:
        """Stage 3.4: (3 + L + 2, D) = [spk_row + emovec | 0 | 0 | text rows + lang row] (masked pad rows
        left out, see the module docstring). `text_ids` with or without start/stop (they are stripped)."""
        emb = self.embeddings
        text = emb.text_embeddings(text_ids) + self.lang_embedding[int(lang_index)][None, :]
        return np.concatenate([emb.conds_latent(spk_row, emovec), text], axis=0)

    def latent(self, prefixes: Sequence[Any], codes: Sequence[np.ndarray]) -> list[np.ndarray]:
        """2.5 has no latent pass: empty rows, which s2mel_content ignores."""
        return [np.zeros((0, self.model_dim), np.float32) for _ in codes]

    # ------------------------------------------------------------------------------- s2mel

    def target_lengths(self, code_lens: Sequence[int]) -> np.ndarray:
        """int(2n * 1.72) as the original computes it (Python double, truncated)."""
        return np.array([int(self.code_upsample * int(n) * self.code_to_frames) for n in code_lens], np.int64)

    @property
    def renders_to_length(self) -> bool:
        return True  # the length regulator always takes its target frames

    def codec_decode(self, codes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Stage 4.1: (S_infer (B, 2 n_max, 1024) zero past each row's 2n, frames (B,) = 2n)."""
        lens = np.array([np.asarray(c).size for c in codes], np.int64)
        c = _pad_stack([np.asarray(x, np.int64).reshape(-1) for x in codes])
        out = self.session(CODEC_DECODE).run(["s_infer"], {"codes": c, "code_lens": lens})["s_infer"]
        return out, lens * self.code_upsample

    def s2mel_content(
        self,
        latents: Sequence[np.ndarray],
        codes: Sequence[np.ndarray],
        frames: Sequence[int | None] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Stage 4.2: (cond (B, max Tg, C), ylens (B,) = Tg); Tg `frames[b]`, or where None the natural
        int(2n * 1.72). `latents` is ignored (2.5 has none)."""
        _, ylens = self.content_lengths(codes, frames)
        with self.times.time("s2mel_content"):
            s_infer, x_lens = self.codec_decode(codes)
            cond = self.session(LENGTH_REGULATOR).run(
                ["y"], {"x": s_infer, "x_lens": x_lens, "y_lens": ylens}
            )["y"]
        return cond, ylens
