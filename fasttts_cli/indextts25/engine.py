"""IndexTTS-2.5 engine: v2's stage API over a 2.5 engine folder (numpy + ONNX Runtime or TensorRT sessions,
never torch).

What 2.5 changes in the stages is `stages25.Stages25`'s (shared with the PyTorch engine); this class
adds the engine folder's side: 2.5's component set and IO check, the host tables and the tiktoken front
end from the folder, and stage 4 on the `codec_decode` and `length_regulator` sessions: codes (25 Hz) ->
`codec_decode` -> S_infer (2n frames, 50 Hz) -> length regulator to int(2n * 1.72) mel frames (or the
frames a render asks for) -> CFM -> BigVGAN. There is no latent pass. Sessions open through the backend
registry like the v2 engine's, so a TensorRT plan runs where the manifest names one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.onnxruntime.session import SessionOptions
from fasttts_cli.errors import EngineMismatchError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2.components import LENGTH_REGULATOR
from fasttts_cli.indextts2.engine import IndexTTS2Engine, _pad_stack
from fasttts_cli.indextts2.folder_sessions import FolderSessions
from fasttts_cli.indextts2.gpt_trtllm import GPT_TRTLLM, LinePrompt
from fasttts_cli.indextts25.components import (
    CODEC_DECODE,
    MODEL_ID25,
    SPK_PROJ_BIAS,
    SPK_PROJ_WEIGHT,
    TABLES25,
    TOKENIZER,
    check_manifest25,
    components25,
    io_matches25,
)
from fasttts_cli.indextts25.stages25 import Stages25, host_embeddings25
from fasttts_cli.spec.engine_folder import Manifest
from fasttts_cli.spec.presets import Preset


class FolderSessions25(FolderSessions):
    """FolderSessions with 2.5's component set and IO check."""

    def open_all(self) -> None:
        for name in components25(self.gpt):
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


class IndexTTS25Engine(Stages25, IndexTTS2Engine):
    """The 2.5 stage API over one engine folder (see the module docstring)."""

    def __init__(
        self, folder: Path, manifest: Manifest, preset: Preset, options: SessionOptions | None = None
    ) -> None:
        super().__init__(folder, manifest, preset, options)
        self.sessions = FolderSessions25(folder, manifest, self.options, {GPT_TRTLLM: self._trtllm_context})
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

    def _table(self, key: str) -> np.ndarray:
        return np.load(self.folder / self.manifest.files[key], allow_pickle=False).astype(np.float32)

    @property
    def embeddings(self) -> dec.HostEmbeddings:
        if self._emb is None:
            tables = {k: self._table(f) for k, f in TABLES25.items() if k != "lang_embedding"}
            self._emb = host_embeddings25(tables, self.tokens)
        return self._emb

    @property
    def lang_embedding(self) -> np.ndarray:
        if self._lang is None:
            self._lang = self._table(TABLES25["lang_embedding"])
        return self._lang

    @property
    def spk_projection(self) -> tuple[np.ndarray, np.ndarray]:
        if self._spk_proj is None:
            self._spk_proj = (self._table(SPK_PROJ_WEIGHT), self._table(SPK_PROJ_BIAS))
        return self._spk_proj

    # ------------------------------------------------------------------------------- GPT

    @property
    def trtllm_prompt_rows(self) -> int:
        """The TensorRT-LLM GPT's prompt rows per line: the 3 conditioning rows and every text position
        (the whole 2.5 prefix goes through its prompt table: trtllm_convert.MergedLayout.text_in_prompt)."""
        return 3 + int(self.embeddings.text_pos.shape[0])

    def _trtllm_context(self) -> dict[str, Any]:
        return {"emb": self.embeddings, "n_conds": self.trtllm_prompt_rows}

    def prefix25(
        self, spk_row: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int], lang_index: int
    ) -> Any:
        """Stages25.prefix25, as this folder's GPT takes it: the (P, D) array for the ONNX / TensorRT
        trunk, or for TensorRT-LLM the same rows as the line's prompt table."""
        prefix = super().prefix25(spk_row, emovec, text_ids, lang_index)
        if GPT_TRTLLM not in self.manifest.components:
            return prefix
        return LinePrompt.from_prefix(prefix, text_ids, self.trtllm_prompt_rows)

    # ------------------------------------------------------------------------------- stage 4

    def latent(self, prefixes: Sequence[Any], codes: Sequence[np.ndarray]) -> list[np.ndarray]:
        """2.5 has no latent pass: empty rows, which s2mel_content ignores."""
        return [np.zeros((0, self.model_dim), np.float32) for _ in codes]

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
