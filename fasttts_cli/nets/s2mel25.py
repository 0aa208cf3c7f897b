"""IndexTTS-2.5's s2mel glue (delta §5): the v2 length regulator and CFM with new inputs.

- Prompt condition: LR(spk_cond_emb) on the continuous normalised w2v-BERT features (v2 fed the
  codec-quantised S_ref).
- Content: LR(S_infer) with S_infer = EnhancedCodec.decode(codes) (B, 2n, 1024) at 50 Hz, no gpt_layer,
  to `int(2n * 1.72 * duration_factor)` mel frames (Python double, left to right).
- `s2mel.pth` = {"net": {"cfm", "length_regulator"}}; the released file also holds `gpt_layer`, which the
  original's load_checkpoint2 skips (it walks only the modules it built): a known extra here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from fasttts_cli.nets.codec_enhanced import UPSAMPLE
from fasttts_cli.nets.s2mel import CODE_TO_FRAMES, S2Mel, build_s2mel, read_s2mel_net
from fasttts_cli.nets.weights import CheckpointKeyError

S2MEL25_PARTS = ("cfm", "length_regulator")
S2MEL25_EXTRAS = ("gpt_layer",)


def target_length25(n_codes: int, duration_factor: float = 1.0) -> int:
    """Mel frames for n codes: the original's `int(S_infer.shape[1] * 1.72 * duration_factor)` with
    S_infer.shape[1] = 2n, i.e. ((2n) * 1.72) * df in float64, truncated toward zero. (v2's floor(1.72 n)
    ran in float32; the two agree at df 1 for n <= 3000, but not for every df.)"""
    return int(UPSAMPLE * int(n_codes) * CODE_TO_FRAMES * float(duration_factor))


def target_lengths25(code_lens: torch.Tensor | Sequence[int], duration_factor: float = 1.0) -> torch.Tensor:
    """(B,) int64 `target_length25` per row."""
    lens = torch.as_tensor(code_lens).reshape(-1).tolist()
    return torch.tensor([target_length25(n, duration_factor) for n in lens], dtype=torch.int64)


def prompt_condition25(
    s2mel: S2Mel, spk_cond_emb: torch.Tensor, feat_lens: torch.Tensor, mel_lens: torch.Tensor
) -> torch.Tensor:
    """spk_cond_emb (B, T, 1024) normalised w2v features valid up to feat_lens (B,) -> (B, max mel_lens, C):
    the prompt's content condition, stretched to the reference mel's frames."""
    return s2mel.length_regulator(spk_cond_emb, feat_lens, mel_lens)


def content25(
    s2mel: S2Mel,
    s_infer: torch.Tensor,
    code_lens: torch.Tensor,
    duration_factor: float = 1.0,
    ylens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """s_infer (B, 2n, 1024) decoded codes, code_lens (B,) codes per row -> (cond (B, max ylens, C), ylens).
    ylens None: `target_lengths25(code_lens, duration_factor)`; else those frames."""
    lens = code_lens.to(torch.int64)
    if ylens is None:
        ylens = target_lengths25(lens, duration_factor).to(s_infer.device)
    return s2mel.length_regulator(s_infer, lens * UPSAMPLE, ylens), ylens


def load_s2mel25(path: Path | str, s2mel_cfg: Mapping[str, Any]) -> tuple[S2Mel, tuple[str, ...]]:
    """Read a 2.5 s2mel.pth: cfm and length_regulator strictly; returns the model (no gpt_layer) and the
    known extra keys found (`net/gpt_layer/...`, sorted). Any other module under `net` is an error."""
    path = Path(path)
    net = read_s2mel_net(path)
    unknown = sorted(set(net) - set(S2MEL25_PARTS) - set(S2MEL25_EXTRAS))
    if unknown:
        raise CheckpointKeyError(
            path, f"unexpected key net/{unknown[0]}", hint="2.5's s2mel.pth holds cfm and length_regulator"
        )
    extras = tuple(sorted(f"net/{m}/{k}" for m in S2MEL25_EXTRAS for k in net.get(m, {})))
    return build_s2mel(s2mel_cfg, net, path, gpt_layer=False), extras
