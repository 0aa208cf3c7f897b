"""The IndexTTS-2.5 stage API on PyTorch, from a 2.5 checkpoint folder (no engine folder needed).

`TorchEngine` (indextts2.engine_torch) with 2.5's stages (`stages25.Stages25`, shared with the ONNX
2.5 engine) in front. The GPT trunk is the same GPT-2 decoder as v2's, so `decode_torch.TorchGPT` drives
it unchanged (static KV cache, one CUDA graph per rows/length bucket, fp16/bf16 from the preset); only
the prefix differs (one CAM++ speaker row, the language row), and it is made on the host as the ONNX
engine makes it. Stage 4 is 2.5's: no latent pass; codes -> EnhancedCodec.decode -> S_infer (2n frames)
-> the length regulator to int(2n * 1.72) (or the asked) frames, fp32; then TorchEngine's CFM + BigVGAN.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2.engine_torch import Content, Frames, TorchEngine
from fasttts_cli.indextts25.stages25 import Stages25, host_embeddings25
from fasttts_cli.nets.codec_enhanced import UPSAMPLE
from fasttts_cli.nets.s2mel import CODE_TO_FRAMES
from fasttts_cli.nets.s2mel25 import content25
from fasttts_cli.spec.presets import Preset


class TorchEngine25(Stages25, TorchEngine):
    """2.5's stages on the PyTorch backend (see the module docstring)."""

    model_tag = "indextts25-torch"

    def __init__(self, modules: Any, preset: Preset, *, device: torch.device | str | None = None) -> None:
        super().__init__(modules, preset, device=device)
        self.code_upsample = UPSAMPLE
        self.code_to_frames = CODE_TO_FRAMES
        proj = modules.gpt.spk_emb_proj
        self.spk_projection = (
            proj.weight.detach().float().cpu().numpy().copy(),
            proj.bias.detach().float().cpu().numpy().copy(),
        )
        self.lang_embedding = modules.gpt.lang_embedding.weight.detach().float().cpu().numpy().copy()

    @staticmethod
    def load_modules(checkpoint_dir: Path) -> Any:
        from fasttts_cli.nets.checkpoint25 import load_checkpoint25

        return load_checkpoint25(checkpoint_dir)

    def _host_embeddings(self, tables: dict[str, np.ndarray]) -> dec.HostEmbeddings:
        return host_embeddings25(tables, self.tokens)

    @property
    def text(self) -> Any:
        """The TextFrontEnd25 from the checkpoint's tiktoken file and config.gpt."""
        if self._text is None:
            from fasttts_cli.indextts25.text import TextFrontEnd25

            self._text = TextFrontEnd25.load(self.modules.tokenizer, self.config.raw["gpt"])
        return self._text

    def speaker_conditioning(self, spk_cond_emb: np.ndarray) -> np.ndarray:
        raise NotImplementedError("IndexTTS-2.5 has no speaker conditioner (its speaker row is CAM++'s)")

    def latent(self, prefixes: Sequence[np.ndarray], codes: Sequence[np.ndarray]) -> list[torch.Tensor]:
        raise NotImplementedError("IndexTTS-2.5 has no latent pass")

    @torch.inference_mode()
    def content(
        self,
        prefixes: Sequence[Any],
        codes: Sequence[np.ndarray],
        frames: Frames = None,
        latents: Sequence[np.ndarray] | None = None,
    ) -> Content:
        """Stage 4.1-4.2 for 2.5 (fp32): S_infer = codec.decode(codes), then the length regulator to the
        target frames. `prefixes` and `latents` are not needed (no latent pass)."""
        with self.times.time("s2mel_content"):
            lens, padded, target = self._code_batch(codes, frames)
            s_infer = self.codec.decode(padded, lens)
            return content25(self.s2mel.model, s_infer, lens, ylens=target)
