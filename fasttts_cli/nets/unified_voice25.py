"""UnifiedVoice in IndexTTS-2.5's campplus mode (delta §3), weight-compatible with the 2.5 `gpt.pth`.

The original is `model_v2.UnifiedVoice(**cfg.gpt, spk_cond_mode="campplus")`. Against IndexTTS-2 its
state dict drops `conditioning_encoder.*`, `perceiver_encoder.*` and `speed_emb.weight`, and adds
`spk_emb_proj.{weight (D, 192), bias (D,)}` (Linear on the CAM++ style vector) and
`lang_embedding.weight (107, D)`. Everything else (emotion chain, text/mel tables, trunk, heads) is
`UnifiedVoiceCore`, shared with the v2 model.

Prefix (P = L + 5 rows): [spk_emb_proj(style) + emovec | 0 | 0 | text_emb + text_pos + lang_row (L+2)],
the language row added to every text row, start and stop included, and to nothing else; L counts the ids
given, so each start/stop id the original strips is a masked zero row on the left. Codes are 25 Hz;
there is no teacher-forced latent pass in 2.5, so this class has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fasttts_cli.nets.unified_voice import Prefix, UnifiedVoiceCore, materialise, read_gpt_state
from fasttts_cli.nets.unified_voice_config import UnifiedVoiceConfig


class UnifiedVoice25(UnifiedVoiceCore):
    def __init__(self, cfg: UnifiedVoiceConfig) -> None:
        super().__init__(cfg)
        if not cfg.campplus:
            raise ValueError("UnifiedVoice25 is the campplus mode (UnifiedVoiceConfig.spk_cond_mode)")
        self.spk_emb_proj = nn.Linear(cfg.style_dim, cfg.model_dim)
        self._add_emotion_modules()
        self.lang_embedding = nn.Embedding(cfg.lang_rows, cfg.model_dim)
        self._add_shared_modules()

    def speaker_vector(self, style: torch.Tensor) -> torch.Tensor:
        """CAM++ style (B, style_dim) -> spk_emb_proj(style) (B, 1, D): the one speaker row."""
        return self.spk_emb_proj(style)[:, None, :]

    def conds_latent(self, spk_vec: torch.Tensor, emovec: torch.Tensor) -> torch.Tensor:
        """[spk_vec + emovec | 0 | 0] -> (B, 3, D); spk_vec (B or 1, 1, D), emovec (B, D). The two slots
        v2 filled with speed_emb are constant zeros here (not learned)."""
        b = emovec.shape[0]
        spk = spk_vec.expand(b, -1, -1) if spk_vec.shape[0] == 1 else spk_vec
        zeros = spk.new_zeros(b, 2, spk.shape[-1])
        return torch.cat([spk + emovec[:, None, :], zeros], dim=1)

    def lang_row(self, lang: int | torch.Tensor) -> torch.Tensor:
        """lang_embedding row of one language index (delta §2.1: en 0, zh 1, es 3, ja 7, ar 13) -> (D,)."""
        idx = torch.as_tensor(lang, dtype=torch.long, device=self.lang_embedding.weight.device)
        return self.lang_embedding(idx.reshape(()))

    def text_embeddings25(self, ids: torch.Tensor, lang: int | torch.Tensor) -> torch.Tensor:
        """ids (L,) without start/stop -> (L+2, D): (text_embedding + text_pos) + lang row, the original's
        order of additions."""
        return self.text_embeddings(ids) + self.lang_row(lang)

    def prefix_embeddings(
        self,
        spk_vec: torch.Tensor,
        emovec: torch.Tensor,
        text_ids: torch.Tensor,
        langs: torch.Tensor | int,
        text_lengths: torch.Tensor | None = None,
    ) -> Prefix:
        """Stage 3.4 for 2.5, batched like v2's (`UnifiedVoiceCore._prefix`): row b =
        [spk_vec_b + emovec_b | 0 | 0 | text rows with lang row langs[b]]. langs (B,) or one index.

        The prefix is n_conds + L + 2 rows wide for text_ids (B, L), as the original's
        `prepare_gpt_inputs` makes it: each start/stop id it strips (2.5's segments end in the stop id 1, and
        a stand-alone '!' is id 0) becomes one more masked zero row on the left. `lengths` counts the rest."""
        conds = self.conds_latent(spk_vec, emovec)
        lang = torch.as_tensor(langs, dtype=torch.long).reshape(-1)
        if lang.numel() == 1:
            lang = lang.expand(text_ids.shape[0])
        return self._prefix(
            conds,
            text_ids,
            text_lengths,
            lambda b, ids: self.text_embeddings25(ids, lang[b]),
            width=conds.shape[1] + text_ids.shape[1] + 2,
        )

    def host_tables(self) -> dict[str, torch.Tensor]:
        """v2's tables plus lang_embedding (lang_rows, D); the speaker row needs spk_emb_proj (a Linear,
        run on the host or folded into the voice)."""
        return {**super().host_tables(), "lang_embedding": self.lang_embedding.weight.detach().float()}


def load_unified_voice25(
    path: Path | str,
    gpt_cfg: Mapping[str, Any],
    *,
    cond_input_size: int = 1024,
    config_path: Path | str = "config.yaml",
) -> tuple[UnifiedVoice25, tuple[str, ...]]:
    """Load a 2.5 `gpt.pth` strictly; returns the model and the known extra keys it skipped (the v2 rules:
    `inference_model.*`, `gpt.wte.*`, `gpt.wpe.*`, GPT-2's causal-mask buffers). A missing/unexpected/
    misshaped key raises CheckpointKeyError naming the file and key."""
    path = Path(path)
    state, extras = read_gpt_state(path)
    cfg = UnifiedVoiceConfig.from_gpt_section(
        gpt_cfg, state, cond_input_size=cond_input_size, config_path=config_path, spk_cond_mode="campplus"
    )
    return materialise(UnifiedVoice25, cfg, state, path), extras
