"""s2mel: GPT latents + codes -> mel (spec §2.7): gpt_layer MLP, length regulator, CFM with the DiT.

Loaded from `s2mel.pth` = {'net': {'cfm': {'estimator.…'}, 'length_regulator': {…}, 'gpt_layer': {…}}}.
Every size comes from config.yaml's `s2mel` section and the tensors.

Batched everywhere with explicit lengths; a padded row gives what the row gives alone:
- `S2Mel.content(latent, vq_emb, code_lens, ylens)` -> (cond (B, max ylens, C), ylens (B,)); ylens: the
  target mel frames per row, by default floor(1.72 n) (the original's); any other target renders the same
  content to that many frames.
- `S2Mel.length_regulator(x, x_lens, ylens)` -> (B, max ylens, C) (prompt condition: x = codec S_ref,
  ylens = #ref mel frames).
- `S2Mel.cfm.estimator` the DiT; `S2Mel.cfm.cfg_velocity` one batched CFG step;
  `S2Mel.cfm.solve` the Euler loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fasttts_cli.cfm import loop as cfm_loop
from fasttts_cli.cfm.schedules import euler_times
from fasttts_cli.errors import InputError
from fasttts_cli.nets.config import dotted
from fasttts_cli.nets.dit import DiT, DiTConfig
from fasttts_cli.nets.wavenet import WaveNetConfig, row_mask
from fasttts_cli.nets.weights import CheckpointKeyError, strict_load, torch_load

# mel frames per semantic code: (22050 / 256) / 50 ~ 1.7227, truncated in the original to 1.72.
CODE_TO_FRAMES = 1.72


def target_lengths(code_lens: torch.Tensor) -> torch.Tensor:
    """floor(1.72 n) exactly as the original computes it (int64 * python float -> float32 -> trunc)."""
    return (code_lens * CODE_TO_FRAMES).long()


# -- gpt_layer ------------------------------------------------------------------------------------------


class GptLayer(nn.Sequential):
    """Linear chain without activations (1280 -> 256 -> 128 -> 1024 in the release); widths from the file."""

    def __init__(self, widths: list[int]) -> None:
        super().__init__(*(nn.Linear(a, b) for a, b in itertools.pairwise(widths)))

    def official_state_dict(self) -> dict[str, torch.Tensor]:
        """Keys of `net/gpt_layer` in s2mel.pth."""
        return dict(self.state_dict())


# -- length regulator -----------------------------------------------------------------------------------


def nearest_indices(src_lens: torch.Tensor, dst_lens: torch.Tensor, size: int | torch.Tensor) -> torch.Tensor:
    """(B, size) source frame per output frame: min(floor(j * (n/y)), n-1) in float32, which is what
    F.interpolate(mode='nearest') computes for one row of n frames resized to y (its 1x/2x fast paths
    give the same numbers)."""
    j = torch.arange(size, device=src_lens.device).to(torch.float32).unsqueeze(0)
    scale = (src_lens.to(torch.float32) / dst_lens.to(torch.float32)).unsqueeze(1)
    idx = torch.floor(j * scale).to(torch.int64)
    return torch.minimum(idx, (src_lens - 1).unsqueeze(1))


class LengthRegulator(nn.Module):
    """InterpolateRegulator, continuous input: content_in_proj -> nearest upsample to ylens ->
    n x [Conv1d k3 -> GroupNorm(1) -> Mish] -> Conv1d k1 -> * mask. `embedding`/`mask_token` are in the
    file but unused at inference."""

    def __init__(self, in_channels: int, channels: int, n_blocks: int, codebook_size: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(n_blocks):
            layers += [nn.Conv1d(channels, channels, 3, 1, 1), nn.GroupNorm(1, channels), nn.Mish()]
        layers.append(nn.Conv1d(channels, channels, 1, 1))
        self.model = nn.Sequential(*layers)
        self.embedding = nn.Embedding(codebook_size, channels)
        self.mask_token = nn.Parameter(torch.zeros(1, channels))
        self.content_in_proj = nn.Linear(in_channels, channels)

    def official_state_dict(self) -> dict[str, torch.Tensor]:
        """Keys of `net/length_regulator` in s2mel.pth."""
        return dict(self.state_dict())

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor, ylens: torch.Tensor) -> torch.Tensor:
        """x (B, N, in_channels) valid up to x_lens (B,); -> (B, max(ylens), channels), zero past ylens[b].

        Padding is zeroed before every conv and GroupNorm statistics are taken over each row's valid
        frames only, so a padded row equals the row alone (the original runs one row at a time).
        """
        h = self.content_in_proj(x)
        t_out = ylens.max()
        idx = nearest_indices(x_lens, ylens, t_out)  # (B, T)
        h = torch.gather(h, 1, idx.unsqueeze(-1).expand(-1, -1, h.shape[-1])).transpose(1, 2)
        mask = row_mask(ylens, t_out, h.dtype).unsqueeze(1)  # (B, 1, T)
        count = ylens.to(h.dtype).view(-1, 1, 1) * h.shape[1]
        for layer in self.model:
            if isinstance(layer, nn.Conv1d):
                h = layer(h * mask)
            elif isinstance(layer, nn.GroupNorm):
                h = _masked_group_norm1(h, mask, count, layer)
            else:
                h = layer(h)
        return (h * mask).transpose(1, 2)


def _masked_group_norm1(
    x: torch.Tensor, mask: torch.Tensor, count: torch.Tensor, gn: nn.GroupNorm
) -> torch.Tensor:
    """GroupNorm with one group, statistics over the valid frames of each row (biased variance)."""
    mean = (x * mask).sum(dim=(1, 2), keepdim=True) / count
    d = (x - mean) * mask
    var = (d * d).sum(dim=(1, 2), keepdim=True) / count
    y = (x - mean) * torch.rsqrt(var + gn.eps)
    return y * gn.weight.view(1, -1, 1) + gn.bias.view(1, -1, 1)


# -- CFM ------------------------------------------------------------------------------------------------


@dataclass
class CFMTrace:
    """Per-step record of `CFM.solve` (row-batched): t (S,), x fed to the DiT (S, B, 80, T),
    raw estimator outputs (S, 2B, 80, T): rows [0, B) conditional, [B, 2B) unconditional."""

    t: torch.Tensor
    x: torch.Tensor
    v: torch.Tensor


class CFM(nn.Module):
    def __init__(self, estimator: DiT) -> None:
        super().__init__()
        self.estimator = estimator

    def official_state_dict(self) -> dict[str, torch.Tensor]:
        """Keys of `net/cfm` in s2mel.pth (`estimator.…`, weight norm as weight_g/weight_v)."""
        return dict(self.state_dict())

    def cfg_velocity(
        self,
        x: torch.Tensor,
        prompt_x: torch.Tensor,
        x_lens: torch.Tensor,
        t: torch.Tensor,
        style: torch.Tensor,
        mu: torch.Tensor,
        cfg_rate: float,
        prompt_lens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One CFG step for B rows: one estimator call on 2B rows [cond; uncond], the uncond rows with zero
        prompt, style and content. Returns (v (B, 80, T) = (1+cfg) v_c - cfg v_u, raw (2B, 80, T)).
        prompt_lens (B,): v is needed only from each row's prompt end on (`DiT.head`'s crop)."""
        raw = self.estimator(
            torch.cat([x, x], dim=0),
            torch.cat([prompt_x, torch.zeros_like(prompt_x)], dim=0),
            torch.cat([x_lens, x_lens], dim=0),
            torch.cat([t, t], dim=0),
            torch.cat([style, torch.zeros_like(style)], dim=0),
            torch.cat([mu, torch.zeros_like(mu)], dim=0),
            prompt_lens=prompt_lens,
        )
        v_c, v_u = raw.chunk(2, dim=0)
        return (1.0 + cfg_rate) * v_c - cfg_rate * v_u, raw

    @torch.inference_mode()
    def solve(
        self,
        mu: torch.Tensor,
        x_lens: torch.Tensor,
        prompt: torch.Tensor,
        prompt_lens: torch.Tensor,
        style: torch.Tensor,
        z: torch.Tensor,
        n_steps: int = 25,
        cfg_rate: float = 0.7,
        trace: bool = False,
    ) -> tuple[torch.Tensor, CFMTrace | None]:
        """Euler from t=0 to 1 in n_steps (the one loop, cfm.loop.euler, over `cfg_velocity`);
        returns (x (B, 80, T), trace or None).

        mu (B, T, C): [prompt condition | content] per row, valid up to x_lens[b]; prompt (B, 80, Tp) ref mel
        valid up to prompt_lens[b] (Tp <= T); style (B, style_dim); z (B, 80, T) the start noise (already
        scaled by the temperature). x's prompt region (and each row's padding) is zeroed at the start and
        after every step; the result keeps that zero prompt region (crop [prompt_len, x_len) for the mel).
        """
        n_rows = z.shape[0]
        run, x0 = cfm_loop.prepare(mu, x_lens, prompt, prompt_lens, style, z, euler_times(n_steps), cfg_rate)
        ts, xs, vs = [], [], []

        def velocity(step: int, x: torch.Tensor, t: np.float32) -> torch.Tensor:
            t_rows = torch.full((n_rows,), float(t), dtype=torch.float32, device=z.device)
            if cfg_rate > 0:
                # a trace keeps the estimator's whole output (the parity vectors hold it); otherwise the
                # head skips the prompt region, whose velocity is discarded
                crop = None if trace else prompt_lens
                v, raw = self.cfg_velocity(x, run.prompt_x, x_lens, t_rows, style, mu, cfg_rate, crop)
            else:
                v = raw = self.estimator(x, run.prompt_x, x_lens, t_rows, style, mu)
            if trace:
                ts.append(torch.tensor(float(t), dtype=torch.float32, device=z.device))
                xs.append(x)
                vs.append(raw)
            return v

        x = cfm_loop.euler(velocity, x0, run.keep, run.times)
        rec = CFMTrace(torch.stack(ts), torch.stack(xs), torch.stack(vs)) if trace else None
        return x, rec


# -- the whole s2mel net --------------------------------------------------------------------------------


class S2Mel(nn.Module):
    """gpt_layer None: 2.5's s2mel, which builds only cfm and length_regulator (nets/s2mel25.py)."""

    def __init__(self, cfm: CFM, length_regulator: LengthRegulator, gpt_layer: GptLayer | None) -> None:
        super().__init__()
        self.cfm = cfm
        self.length_regulator = length_regulator
        self.gpt_layer = gpt_layer

    def prompt_condition(
        self, s_ref: torch.Tensor, ref_lens: torch.Tensor, mel_lens: torch.Tensor
    ) -> torch.Tensor:
        """s_ref (B, N, 1024) = codec-quantized reference features valid up to ref_lens (B,) ->
        (B, max mel_lens, C); mel_lens = #reference mel frames per row."""
        return self.length_regulator(s_ref, ref_lens, mel_lens)

    def content(
        self,
        latent: torch.Tensor,
        vq_emb: torch.Tensor,
        code_lens: torch.Tensor,
        ylens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """latent (B, n, gpt_dim), vq_emb (B, n, 1024) = codec vq2emb(codes), code_lens (B,), ylens (B,)
        target frames (>= 1; None: floor(1.72 n)) -> (cond (B, max ylens, C), ylens)."""
        if self.gpt_layer is None:
            raise ValueError("this s2mel has no gpt_layer (2.5): use s2mel25.content25")
        s_infer = vq_emb + self.gpt_layer(latent)
        if ylens is None:
            ylens = target_lengths(code_lens)
        return self.length_regulator(s_infer, code_lens, ylens), ylens

    def official_state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """The value of `net` in s2mel.pth: per module, official keys (weight norm as weight_g/weight_v)."""
        net = {
            "cfm": self.cfm.official_state_dict(),
            "length_regulator": self.length_regulator.official_state_dict(),
        }
        if self.gpt_layer is not None:
            net["gpt_layer"] = self.gpt_layer.official_state_dict()
        return net


# -- loading --------------------------------------------------------------------------------------------


def _get(cfg: Mapping[str, Any], path: str, file: Path) -> Any:
    return dotted(cfg, path, lambda: InputError(file, f"config.yaml lacks s2mel.{path}"))


def _shape(sd: Mapping[str, torch.Tensor], key: str, file: Path, where: str) -> tuple[int, ...]:
    if key not in sd:
        raise CheckpointKeyError(file, f"missing key {where}{key}")
    return tuple(sd[key].shape)


def _check_variant(s2mel_cfg: Mapping[str, Any], file: Path) -> None:
    """Refuse config variants this implementation does not cover (instead of computing something else)."""
    want = {
        "dit_type": "DiT",
        "DiT.final_layer_type": "wavenet",
        "DiT.time_as_token": False,
        "DiT.style_as_token": False,
        "DiT.is_causal": False,
        "DiT.long_skip_connection": True,
        "DiT.style_condition": True,
        "DiT.f0_condition": False,
        "wavenet.style_condition": True,
        "length_regulator.is_discrete": False,
        "length_regulator.vector_quantize": False,
        "length_regulator.f0_condition": False,
    }
    for path, value in want.items():
        got = _get(s2mel_cfg, path, file)
        if got != value:
            raise InputError(file, f"s2mel.{path} = {got!r} is not supported (IndexTTS-2 uses {value!r})")
    if int(s2mel_cfg["length_regulator"].get("n_codebooks", 1)) != 1:
        raise InputError(file, "s2mel.length_regulator.n_codebooks != 1 is not supported")


def build_s2mel(
    s2mel_cfg: Mapping[str, Any],
    net: Mapping[str, Mapping[str, torch.Tensor]],
    file: Path,
    *,
    gpt_layer: bool = True,
) -> S2Mel:
    """Modules sized from the config and (where the original hard-codes a size) from the tensors.
    gpt_layer False: without it (2.5), whether or not `net` holds one."""
    _check_variant(s2mel_cfg, file)
    for part in ("cfm", "length_regulator", "gpt_layer")[: 3 if gpt_layer else 2]:
        if part not in net:
            raise CheckpointKeyError(file, f"missing key net/{part}")
    cfm_sd, lr_sd = net["cfm"], net["length_regulator"]
    g = lambda p: _get(s2mel_cfg, p, file)  # noqa: E731

    wn = WaveNetConfig(
        hidden_dim=int(g("wavenet.hidden_dim")),
        num_layers=int(g("wavenet.num_layers")),
        kernel_size=int(g("wavenet.kernel_size")),
        dilation_rate=int(g("wavenet.dilation_rate")),
        cond_dim=int(g("wavenet.hidden_dim")),
    )
    hidden = int(g("DiT.hidden_dim"))
    ffn = _shape(cfm_sd, "estimator.transformer.layers.0.feed_forward.w1.weight", file, "net/cfm/")[0]
    dcfg = DiTConfig(
        hidden_dim=hidden,
        num_heads=int(g("DiT.num_heads")),
        depth=int(g("DiT.depth")),
        in_channels=int(g("DiT.in_channels")),
        content_dim=int(g("DiT.content_dim")),
        style_dim=int(g("style_encoder.dim")),
        content_codebook_size=int(g("DiT.content_codebook_size")),
        max_positions=_shape(cfm_sd, "estimator.input_pos", file, "net/cfm/")[0],
        freq_embed_dim=2 * _shape(cfm_sd, "estimator.t_embedder.freqs", file, "net/cfm/")[0],
        wavenet=wn,
        uvit_skip=bool(g("DiT.uvit_skip_connection")),
        ffn_dim=ffn,
    )
    channels = int(g("length_regulator.channels"))
    if len(g("length_regulator.sampling_ratios")) == 0:
        raise InputError(file, "s2mel.length_regulator.sampling_ratios must be non-empty")
    lr = LengthRegulator(
        in_channels=int(g("length_regulator.in_channels")),
        channels=channels,
        n_blocks=len(g("length_regulator.sampling_ratios")),
        codebook_size=int(g("length_regulator.content_codebook_size")),
    )
    gl = GptLayer(_gpt_layer_widths(net["gpt_layer"], file)) if gpt_layer else None
    model = S2Mel(CFM(DiT(dcfg)), lr, gl)
    strict_load(model.cfm, cfm_sd, file, prefix="net/cfm/")
    strict_load(model.length_regulator, lr_sd, file, prefix="net/length_regulator/")
    if model.gpt_layer is not None:
        strict_load(model.gpt_layer, net["gpt_layer"], file, prefix="net/gpt_layer/")
    return model.eval()


def _gpt_layer_widths(sd: Mapping[str, torch.Tensor], file: Path) -> list[int]:
    n = sum(1 for k in sd if k.endswith(".weight"))
    if n == 0:
        raise CheckpointKeyError(file, "missing key net/gpt_layer/0.weight")
    widths = [_shape(sd, "0.weight", file, "net/gpt_layer/")[1]]
    for i in range(n):
        widths.append(_shape(sd, f"{i}.weight", file, "net/gpt_layer/")[0])
    return widths


def read_s2mel_net(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """s2mel.pth's `net` (every module's state dict, a DataParallel `module.` prefix stripped)."""
    blob = torch_load(path)
    if not isinstance(blob, Mapping) or "net" not in blob or not isinstance(blob["net"], Mapping):
        raise CheckpointKeyError(
            path, "missing key net (expected {'net': {'cfm', 'length_regulator', 'gpt_layer'}})"
        )
    return {k: _strip_module(v) for k, v in blob["net"].items() if isinstance(v, Mapping)}


def load_s2mel(path: Path, s2mel_cfg: Mapping[str, Any]) -> S2Mel:
    """Read s2mel.pth (official layout) with strict keys; `s2mel_cfg` is config.yaml's `s2mel` section."""
    path = Path(path)
    net = {k: v for k, v in read_s2mel_net(path).items() if k in ("cfm", "length_regulator", "gpt_layer")}
    return build_s2mel(s2mel_cfg, net, path)


def _strip_module(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # The original strips a DataParallel `module.` prefix when loading; do the same.
    return {(k[len("module.") :] if k.startswith("module.") else k): v for k, v in sd.items()}
