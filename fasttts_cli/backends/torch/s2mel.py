"""Batched s2mel (content, Euler CFM with batched CFG) and batched BigVGAN on one device.

CFM: the one Euler loop (`cfm.loop.euler`); its velocity is one DiT call on 2B rows [cond; uncond]
(the unconditional rows with zero prompt, style and content; v = (1 + cfg) v_c - cfg v_u), exactly
`build.s2mel.CFM.cfg_velocity`. The velocity reads static buffers of a (rows bucket, frames bucket) and
writes v into another, so on CUDA it is captured once per bucket and replayed for all steps and batches
of that shape; the Euler update runs outside the graph (three elementwise kernels per step). Padding to a
bucket changes nothing in a row: the DiT masks keys past each row's x_lens and its WaveNet reflects at each
row's own end (`DiT.forward(row_padding=True)`); padding rows get a full length and zero inputs.
Time points and their float32 accumulation are the numpy runtime's (`engine.euler_times`, `time_grid`).

Half precision (`dtype` fp16/bf16): the DiT runs under autocast with its weights in half, except the
normalisations (RMSNorm / AdaRMS norms, the final LayerNorm), whose weights stay fp32 and whose inputs
are cast to fp32; masks are boolean or exact 0/1, the Euler state x stays fp32. The length regulator
and gpt_layer (once per batch) run in fp32.

Vocoder: BigVGAN in fp32 (TF32 matmuls/convs allowed on CUDA: half precision is known to hurt BigVGAN
v2), per-row lengths (a padded row equals the row alone), a graph per (rows, frames) bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fasttts_cli.backends.torch.graphs import GraphRunner, bucket, round_up, row_buckets
from fasttts_cli.cfm import loop as cfm_loop
from fasttts_cli.cfm.schedules import euler_times
from fasttts_cli.nets.bigvgan import BigVGAN
from fasttts_cli.nets.dit import RMSNorm
from fasttts_cli.nets.s2mel import S2Mel

_NORMS = (RMSNorm, nn.LayerNorm, nn.GroupNorm)


def _to_fp32_inputs(_module: nn.Module, args: tuple) -> tuple:
    return tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


def half_with_fp32_norms(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast parameters to `dtype` in place, except those of normalisation modules, which keep fp32 weights
    and get their inputs cast to fp32 (run the module under autocast). Buffers stay as they are."""
    for m in module.modules():
        if isinstance(m, _NORMS):
            m.float()
            m.register_forward_pre_hook(_to_fp32_inputs)
            continue
        for p in m.parameters(recurse=False):
            p.data = p.data.to(dtype)
    return module


def time_grid(steps: int, schedule: str = "uniform") -> np.ndarray:
    """(steps + 1,) float32 Euler time points, the same grid as the ONNX runtime's (uniform equals the
    original's torch.linspace value for value)."""
    return euler_times(steps, schedule)


def _pad_stack(rows: Sequence[torch.Tensor], length: int, dim: int) -> torch.Tensor:
    out = []
    for r in rows:
        pad = [0, 0] * (r.dim() - dim - 1) + [0, length - r.shape[dim]]
        out.append(torch.nn.functional.pad(r, pad))
    return torch.stack(out)


@dataclass(frozen=True)
class S2MelSettings:
    max_rows: int = 16
    frames_step: int = 64  # padded-length bucket of the CFM step graphs (mel frames)
    vocoder_frames_step: int = 32
    use_graphs: bool | None = None  # None: on CUDA


@dataclass
class _StepBuffers:
    x: torch.Tensor  # (b, n_mels, T) fp32 Euler state fed to the step
    v: torch.Tensor  # (b, n_mels, T) fp32 guided velocity out of it
    prompt2: torch.Tensor  # (2b, n_mels, T) [prompt_x; 0]
    lens2: torch.Tensor  # (2b,) int64
    style2: torch.Tensor  # (2b, style_dim)
    mu2: torch.Tensor  # (2b, T, C)
    t: torch.Tensor  # (1,) fp32
    cfg: torch.Tensor  # (1,) fp32


class TorchS2Mel:
    """s2mel stages on one device; `s2mel` is moved (and, for half precision, cast) in place."""

    def __init__(
        self,
        s2mel: S2Mel,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        settings: S2MelSettings = S2MelSettings(),
    ) -> None:
        self.device = torch.device(device)
        self.dtype = dtype
        self.settings = settings
        self.model = s2mel.to(self.device).float().eval().requires_grad_(False)
        self.estimator = self.model.cfm.estimator
        if dtype != torch.float32:
            half_with_fp32_norms(self.estimator, dtype)
        self.graphs = GraphRunner.for_device(settings.use_graphs, self.device)
        self.row_buckets = row_buckets(settings.max_rows, (1,))
        self._buffers: dict[tuple[int, int], _StepBuffers] = {}
        self.n_mels = self.estimator.cfg.in_channels

    # ------------------------------------------------------------------------------- content

    @torch.inference_mode()
    def content(
        self,
        latents: Sequence[torch.Tensor],
        vq_emb: torch.Tensor,
        code_lens: torch.Tensor,
        ylens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stage 4.1 (fp32): latents (n_i, D) per row, vq_emb (B, n_max, 1024), ylens (B,) target frames
        (None: floor(1.72 n)) -> (cond (B, Tg, C), ylens)."""
        n_max = int(vq_emb.shape[1])
        lat = _pad_stack([torch.as_tensor(x).float().to(self.device) for x in latents], n_max, 0)
        target = None if ylens is None else ylens.to(self.device)
        return self.model.content(lat, vq_emb.float().to(self.device), code_lens.to(self.device), target)

    @torch.inference_mode()
    def prompt_condition(self, s_ref: torch.Tensor, mel_frames: int) -> torch.Tensor:
        """Stage 1.7 (fp32): S_ref (N, 1024) -> (mel_frames, C)."""
        x = torch.as_tensor(s_ref).float().to(self.device)[None]
        lens = torch.tensor([x.shape[1]], device=self.device)
        return self.model.prompt_condition(x, lens, torch.tensor([mel_frames], device=self.device))[0]

    # ------------------------------------------------------------------------------- CFM

    def _autocast(self):
        if self.dtype == torch.float32:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=False)

    def _step_body(self, buf: _StepBuffers) -> None:
        b = buf.x.shape[0]
        with self._autocast():
            raw = self.estimator(
                torch.cat([buf.x, buf.x], dim=0),
                buf.prompt2,
                buf.lens2,
                buf.t.expand(2 * b),
                buf.style2,
                buf.mu2,
            )
        v_c, v_u = raw.float().chunk(2, dim=0)
        buf.v.copy_((1.0 + buf.cfg) * v_c - buf.cfg * v_u)

    def _buffers_for(self, b: int, t: int, c: int, style_dim: int) -> _StepBuffers:
        key = (b, t)
        buf = self._buffers.get(key)
        if buf is None or buf.mu2.shape[-1] != c or buf.style2.shape[-1] != style_dim:
            dev, f32 = self.device, torch.float32
            buf = _StepBuffers(
                x=torch.zeros(b, self.n_mels, t, dtype=f32, device=dev),
                v=torch.zeros(b, self.n_mels, t, dtype=f32, device=dev),
                prompt2=torch.zeros(2 * b, self.n_mels, t, dtype=f32, device=dev),
                lens2=torch.full((2 * b,), t, dtype=torch.long, device=dev),
                style2=torch.zeros(2 * b, style_dim, dtype=f32, device=dev),
                mu2=torch.zeros(2 * b, t, c, dtype=f32, device=dev),
                t=torch.zeros(1, dtype=f32, device=dev),
                cfg=torch.zeros(1, dtype=f32, device=dev),
            )
            self._buffers[key] = buf
        return buf

    @torch.inference_mode()
    def cfm(
        self,
        mu: torch.Tensor,
        x_lens: torch.Tensor,
        prompt: torch.Tensor,
        prompt_lens: torch.Tensor,
        style: torch.Tensor,
        z: torch.Tensor,
        *,
        steps: int = 25,
        cfg_rate: float = 0.7,
        schedule: str = "uniform",
    ) -> torch.Tensor:
        """Stage 4.4, batched: mu (B, T, C) [prompt condition | content] valid up to x_lens; prompt
        (B, n_mels, Tp) valid up to prompt_lens; style (B, S); z (B, n_mels, T) start noise.
        Returns x (B, n_mels, T) fp32 (prompt region and padding zero)."""
        dev = self.device
        n, _, t_len = z.shape
        if n > self.settings.max_rows:
            raise ValueError(f"{n} rows exceed this s2mel runner's {self.settings.max_rows}")
        b = bucket(n, self.row_buckets)
        tb = round_up(t_len, self.settings.frames_step)
        c, sd = int(mu.shape[-1]), int(style.shape[-1])
        buf = self._buffers_for(b, tb, c, sd)
        # the bucket: real rows first; padding rows keep nothing (x stays zero) but feed the DiT a full
        # length and zero inputs
        lens = torch.zeros(b, dtype=torch.long, device=dev)
        lens[:n] = x_lens.to(dev).long()
        p_lens = torch.zeros(b, dtype=torch.long, device=dev)
        p_lens[:n] = prompt_lens.to(dev).long()
        prompt = prompt.float().to(dev)
        prompt_b = torch.zeros(b, self.n_mels, prompt.shape[-1], device=dev)
        prompt_b[:n] = prompt
        z_b = torch.zeros(b, self.n_mels, tb, device=dev)
        z_b[:n, :, :t_len] = z.float().to(dev)
        prompt_x, keep = cfm_loop.masks(prompt_b, p_lens, lens, z_b)
        buf.prompt2.zero_()
        buf.prompt2[:b] = prompt_x
        buf.lens2.copy_(torch.where(lens > 0, lens, tb).repeat(2))
        buf.style2.zero_()
        buf.style2[:n] = style.float().to(dev)
        buf.mu2.zero_()
        buf.mu2[:n, :t_len] = mu.float().to(dev)
        buf.cfg.fill_(float(cfg_rate))

        def velocity(step: int, x: torch.Tensor, t: np.float32) -> torch.Tensor:
            buf.x.copy_(x)
            buf.t.fill_(float(t))
            self.graphs.run(("cfm", b, tb, c, sd), lambda: self._step_body(buf))
            return buf.v

        x = cfm_loop.euler(velocity, z_b * keep, keep, time_grid(steps, schedule))
        return x[:n, :, :t_len].clone()

    def mels(self, x: torch.Tensor, prompt_lens: torch.Tensor, x_lens: torch.Tensor) -> list[torch.Tensor]:
        """Each row's generated mel x[b, :, prompt_len:x_len]."""
        return [x[i, :, int(prompt_lens[i]) : int(x_lens[i])] for i in range(x.shape[0])]


class TorchVocoder:
    """BigVGAN, batched with per-row lengths, fp32 (TF32 on CUDA), a graph per (rows, frames) bucket."""

    def __init__(
        self,
        bigvgan: BigVGAN,
        *,
        device: torch.device | str = "cpu",
        settings: S2MelSettings = S2MelSettings(),
        tf32: bool = True,
    ) -> None:
        self.device = torch.device(device)
        self.model = bigvgan.to(self.device).float().eval().requires_grad_(False)
        self.settings = settings
        self.hop = self.model.cfg.hop
        self.tf32 = tf32 and self.device.type == "cuda"
        self.graphs = GraphRunner.for_device(settings.use_graphs, self.device)
        self.row_buckets = row_buckets(settings.max_rows, (1,))
        self._buffers: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _body(self, mel: torch.Tensor, lens: torch.Tensor, wav: torch.Tensor) -> None:
        wav.copy_(self.model(mel, lens))

    @torch.inference_mode()
    def __call__(self, mels: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """mels (n_mels, T_b) per row -> wav (hop * T_b,) float32 per row."""
        n = len(mels)
        if n > self.settings.max_rows:
            raise ValueError(f"{n} rows exceed this vocoder's {self.settings.max_rows}")
        lens = [int(m.shape[-1]) for m in mels]
        b = bucket(n, self.row_buckets)
        tb = round_up(max(lens), self.settings.vocoder_frames_step)
        key = (b, tb)
        if key not in self._buffers:
            nm = self.model.cfg.num_mels
            self._buffers[key] = (
                torch.zeros(b, nm, tb, device=self.device),
                torch.full((b,), tb, dtype=torch.long, device=self.device),
                torch.zeros(b, 1, tb * self.hop, device=self.device),
            )
        mel_buf, len_buf, wav_buf = self._buffers[key]
        mel_buf.zero_()
        len_buf.fill_(tb)
        for i, m in enumerate(mels):
            mel_buf[i, :, : lens[i]] = torch.as_tensor(m).float().to(self.device)
        len_buf[:n] = torch.tensor(lens, device=self.device)
        prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        if self.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        try:
            self.graphs.run(("vocoder", b, tb), lambda: self._body(mel_buf, len_buf, wav_buf))
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
        return [wav_buf[i, 0, : lens[i] * self.hop].clone() for i in range(n)]
