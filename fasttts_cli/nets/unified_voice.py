"""UnifiedVoice v2 (IndexTTS-2's GPT), weight-compatible with the official `gpt.pth`. `UnifiedVoiceCore`
is the part 2.5's campplus mode (nets/unified_voice25.py) shares with it.

Stage API (explicit tensors in, tensors out; each stage matches one row of the parity table):
  speaker_conditioning / speaker_latents     stage 3.2   (B,T,C) w2v features -> (B,32,D)
  emotion_conditioning                       stage 3.1   emo (+ speaker) features, alpha -> (B,D) `.emovec`
  conds_latent / text_embeddings / prefix_embeddings   stage 3.4
  mel_input_embedding + trunk (+ decode_forced)        stage 3.5
  latent                                               stage 3.7

The GPT-2 trunk is our own (HF `Conv1D` layout, keys `gpt.h.N...`, `gpt.ln_f`) and is a pure function of
`inputs_embeds`, an attention mask and explicit past key/values: every embedding and position lookup
happens outside it (on the host at run time), so one exported graph serves prefill and decode steps.

KV cache layout: per layer a (key, value) pair, each (B, H, T_past, Dh), Dh = D / H; or the same stacked
as one tensor (L, 2, B, H, T_past, Dh) (index 0 = key, 1 = value). `trunk` returns the cache in the form
it was given (a tuple of pairs when `past_kv` is None).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from fasttts_cli.errors import InputError
from fasttts_cli.nets.conformer import ConformerEncoder, subsampling_in_freq_groups
from fasttts_cli.nets.gpt2 import GPT2Trunk, PosTable
from fasttts_cli.nets.perceiver import PerceiverResampler
from fasttts_cli.nets.unified_voice_config import UnifiedVoiceConfig
from fasttts_cli.nets.weights import strict_load, torch_load

KVCache = tuple[tuple[torch.Tensor, torch.Tensor], ...] | torch.Tensor
LogitsFor = Literal["all", "last", "none"]

# Keys a saved checkpoint may carry that are not weights of this model (spec §3.1): the inference
# wrapper's aliases, the mel embedding re-attached as `gpt.wte`, and GPT-2's old causal-mask buffers.
_IGNORED_PREFIXES = ("inference_model.", "gpt.wte.", "gpt.wpe.")
_IGNORED_RE = re.compile(r"^gpt\.h\.\d+\.attn\.(bias|masked_bias)$")


# --------------------------------------------------------------------------------------------- outputs


@dataclass
class SpeakerConditioning:
    conformer_out: torch.Tensor  # (B, T', C)
    conformer_mask: torch.Tensor  # (B, 1, T') bool
    latents: torch.Tensor  # (B, num_latents, D)


@dataclass
class EmotionConditioning:
    emo_conformer_out: torch.Tensor  # (B, T', C) emotion conformer on the emotion features
    emo_conformer_mask: torch.Tensor  # (B, 1, T') bool
    emo_perceiver_out: torch.Tensor  # (B, 1, E)
    emo_emovec_layer_out: torch.Tensor  # (B, D) emovec_layer(perceiver)
    emovec_emo: torch.Tensor  # (B, D) emo_layer(...) of the emotion features
    emo_base_conformer_out: torch.Tensor | None  # (B, T', C) emotion conformer on the speaker features
    emovec_base: torch.Tensor | None  # (B, D) the same chain on the speaker features
    emovec: torch.Tensor  # (B, D) base + alpha * (emo - base); emovec_emo when no speaker given


@dataclass
class Prefix:
    embeds: torch.Tensor  # (B, P, D) left-padded [conds | text]; padding rows are zero vectors
    mask: torch.Tensor  # (B, P) int64, 0 on left padding
    lengths: torch.Tensor  # (B,) int64 valid rows per prefix


@dataclass
class ForcedDecode:
    prefill_hidden: torch.Tensor  # (B, P+1, D) all positions of the prefill step
    hidden: torch.Tensor  # (B, n+1, D) last position of each step (step 0 = prefill)
    logits: torch.Tensor  # (B, n+1, V); row n predicts what follows the last forced code
    past_kv: KVCache


# --------------------------------------------------------------------------------------------- model


class UnifiedVoiceCore(nn.Module):
    """What both speaker-conditioning modes share (the emotion chain, the text and mel tables, the trunk
    and its heads, the prefix layout and the forced decode); `UnifiedVoice` (IndexTTS-2) and
    `unified_voice25.UnifiedVoice25` (2.5's campplus mode) add their speaker modules around it."""

    def __init__(self, cfg: UnifiedVoiceConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def _add_emotion_modules(self) -> None:
        self.emo_conditioning_encoder = ConformerEncoder(self.cfg.emo_conformer)
        self.emo_perceiver_encoder = PerceiverResampler(self.cfg.emo_perceiver)

    def _add_shared_modules(self) -> None:
        cfg, d = self.cfg, self.cfg.model_dim
        self.text_embedding = nn.Embedding(cfg.text_vocab, d)
        self.mel_embedding = nn.Embedding(cfg.number_mel_codes, d)
        self.text_pos_embedding = PosTable(cfg.text_pos_rows, d)
        self.mel_pos_embedding = PosTable(cfg.mel_pos_rows, d)
        self.emovec_layer = nn.Linear(cfg.emo_perceiver.dim, d)
        self.emo_layer = nn.Linear(d, d)
        self.gpt = GPT2Trunk(cfg)
        self.final_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.text_head = nn.Linear(d, cfg.text_vocab)  # loaded for strictness; unused at inference
        self.mel_head = nn.Linear(d, cfg.number_mel_codes)

    # ----------------------------------------------------------------------------- emotion

    def _emovec_chain(
        self, cond_emb: torch.Tensor, lengths: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        out, mask = self.emo_conditioning_encoder(cond_emb, lengths)
        perc = self.emo_perceiver_encoder(out, mask[:, 0])  # (B, 1, E)
        syn = self.emovec_layer(perc[:, 0])
        return out, mask, perc, syn, self.emo_layer(syn)

    def emovec_of(self, cond_emb: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """The original's `get_emovec`: emo_layer(emovec_layer(emo_perceiver(emo_conformer(x)))) -> (B, D)."""
        return self._emovec_chain(cond_emb, lengths)[4]

    def emotion_conditioning(
        self,
        emo_cond_emb: torch.Tensor,
        spk_cond_emb: torch.Tensor | None = None,
        alpha: float | torch.Tensor = 1.0,
        *,
        emo_lengths: torch.Tensor | None = None,
        spk_lengths: torch.Tensor | None = None,
    ) -> EmotionConditioning:
        """Stage 3.1 with its intermediates. With speaker features the blend is computed the way the
        original's `merge_emovec` does, base + alpha * (emo - base), also for alpha 1 (the default mode).
        alpha: a float or a (B,) tensor (one per row)."""
        e_out, e_mask, e_perc, e_syn, e_vec = self._emovec_chain(emo_cond_emb, emo_lengths)
        if spk_cond_emb is None:
            return EmotionConditioning(e_out, e_mask, e_perc, e_syn, e_vec, None, None, e_vec)
        b_out, _, _, _, b_vec = self._emovec_chain(spk_cond_emb, spk_lengths)
        a = torch.as_tensor(alpha, dtype=e_vec.dtype, device=e_vec.device)
        if a.dim() == 1:
            a = a[:, None]
        return EmotionConditioning(
            e_out, e_mask, e_perc, e_syn, e_vec, b_out, b_vec, b_vec + a * (e_vec - b_vec)
        )

    # ----------------------------------------------------------------------------- embeddings

    def text_embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (L,) without start/stop -> (L+2, D): text_embedding([start, ids, stop]) + text_pos[0..L+1]."""
        c = self.cfg
        full = torch.cat([ids.new_tensor([c.start_text_token]), ids, ids.new_tensor([c.stop_text_token])])
        pos = torch.arange(full.shape[0], device=ids.device)
        return self.text_embedding(full) + self.text_pos_embedding.emb(pos)

    def _prefix(
        self,
        conds: torch.Tensor,
        text_ids: torch.Tensor,
        text_lengths: torch.Tensor | None,
        text_rows: Callable[[int, torch.Tensor], torch.Tensor],
        width: int = 0,
    ) -> Prefix:
        """Stage 3.4, batched: row b = [conds_b | text_rows(b, ids_b)], left-padded with zero vectors to the
        longest row, or to `width` rows if that is more.

        text_ids (B, L); a row's ids are its first text_lengths[b] entries (all when None), with any
        start/stop text token dropped as the original does, so padding with the stop id also works.
        """
        c = self.cfg
        rows = []
        for b in range(text_ids.shape[0]):
            ids = text_ids[b] if text_lengths is None else text_ids[b, : int(text_lengths[b])]
            ids = ids[(ids != c.start_text_token) & (ids != c.stop_text_token)].long()
            rows.append(torch.cat([conds[b], text_rows(b, ids)], dim=0))
        p = max(width, *(r.shape[0] for r in rows))
        embeds = conds.new_zeros(len(rows), p, c.model_dim)
        mask = torch.zeros(len(rows), p, dtype=torch.long, device=conds.device)
        for b, r in enumerate(rows):
            embeds[b, p - r.shape[0] :] = r
            mask[b, p - r.shape[0] :] = 1
        return Prefix(embeds, mask, mask.sum(dim=1))

    def host_tables(self) -> dict[str, torch.Tensor]:
        """The lookup tables the host needs around an exported trunk (float32, detached), by name:
        text_embedding (V_text, D), text_pos (max_text_tokens+2, D), mel_embedding (8194, D),
        mel_pos (max_mel_tokens+3, D), and the mode's own (speed_emb (2, D) or lang_embedding)."""
        return {
            "text_embedding": self.text_embedding.weight.detach().float(),
            "text_pos": self.text_pos_embedding.emb.weight.detach().float(),
            "mel_embedding": self.mel_embedding.weight.detach().float(),
            "mel_pos": self.mel_pos_embedding.emb.weight.detach().float(),
        }

    def mel_input_embedding(self, codes: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """codes (B, n), positions (B, n) -> mel_embedding(codes) + mel_pos[positions] (B, n, D).
        Generation: start token 8192 at position 0, code k at position k + 2. Latent pass: 0..n+1."""
        return self.mel_embedding(codes) + self.mel_pos_embedding.emb(positions)

    # ----------------------------------------------------------------------------- trunk

    def empty_kv(self, batch: int, *, stacked: bool = False, dtype: torch.dtype | None = None) -> KVCache:
        c = self.cfg
        dtype = dtype or self.mel_head.weight.dtype
        dev = self.mel_head.weight.device
        if stacked:
            return torch.zeros(c.layers, 2, batch, c.heads, 0, c.head_dim, dtype=dtype, device=dev)
        z = torch.zeros(batch, c.heads, 0, c.head_dim, dtype=dtype, device=dev)
        return tuple((z, z) for _ in range(c.layers))

    def trunk(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        past_kv: KVCache | None = None,
        *,
        logits_for: LogitsFor = "all",
    ) -> tuple[torch.Tensor | None, torch.Tensor, KVCache]:
        """One GPT-2 pass over new tokens.

        inputs_embeds (B, T, D); attention_mask (B, T_past + T), 1 = real token, 0 = padding (left
        padding); past_kv as described in the module docstring (None = empty).
        Returns (logits (B, T, V) or (B, 1, V) for logits_for="last" or None for "none",
        hidden (B, T, D) after ln_f AND final_norm, present_kv (B, H, T_past + T, Dh) per layer).
        Queries attend causally to every earlier real token; positions are not used inside.
        """
        stacked = isinstance(past_kv, torch.Tensor)
        if past_kv is None:
            past_kv = self.empty_kv(inputs_embeds.shape[0], dtype=inputs_embeds.dtype)
        pairs = [(p[0], p[1]) for p in past_kv.unbind(0)] if stacked else list(past_kv)
        t_new = inputs_embeds.shape[1]
        t_total = attention_mask.shape[1]
        q_pos = torch.arange(t_new, device=inputs_embeds.device) + (t_total - t_new)
        k_pos = torch.arange(t_total, device=inputs_embeds.device)
        allowed = (k_pos[None, :] <= q_pos[:, None])[None, None] & (attention_mask[:, None, None, :] > 0)
        x = inputs_embeds
        present = []
        for block, (pk, pv) in zip(self.gpt.h, pairs, strict=True):
            x, k, v = block(x, allowed, pk, pv)
            present.append((k, v))
        hidden = self.final_norm(self.gpt.ln_f(x))
        if logits_for == "none":
            logits = None
        else:
            logits = self.mel_head(hidden[:, -1:] if logits_for == "last" else hidden)
        if stacked:
            return logits, hidden, torch.stack([torch.stack(kv) for kv in present])
        return logits, hidden, tuple(present)

    # ----------------------------------------------------------------------------- composite passes

    def decode_forced(self, prefix: Prefix, codes: torch.Tensor) -> ForcedDecode:
        """Reference generation path (stage 3.5) under teacher forcing, with the KV cache.

        Step 0 feeds the prefix and the start token at mel position 0; step k >= 1 feeds codes[:, k-1] at
        mel position k + 1 (code j at position j + 2, the original's generation quirk). codes (B, n).
        """
        c = self.cfg
        b, n = codes.shape
        dev = prefix.embeds.device
        start = torch.full((b, 1), c.start_mel_token, dtype=torch.long, device=dev)
        zero = torch.zeros((b, 1), dtype=torch.long, device=dev)
        x = torch.cat([prefix.embeds, self.mel_input_embedding(start, zero)], dim=1)
        mask = torch.cat([prefix.mask, torch.ones_like(zero)], dim=1)
        logits, prefill_hidden, past = self.trunk(x, mask, logits_for="last")
        all_logits, all_hidden = [logits[:, 0]], [prefill_hidden[:, -1]]
        for k in range(1, n + 1):
            pos = torch.full((b, 1), k + 1, dtype=torch.long, device=dev)
            x = self.mel_input_embedding(codes[:, k - 1 : k].long(), pos)
            mask = torch.cat([mask, torch.ones_like(zero)], dim=1)
            logits, hidden, past = self.trunk(x, mask, past, logits_for="last")
            all_logits.append(logits[:, 0])
            all_hidden.append(hidden[:, -1])
        return ForcedDecode(prefill_hidden, torch.stack(all_hidden, 1), torch.stack(all_logits, 1), past)


class UnifiedVoice(UnifiedVoiceCore):
    """IndexTTS-2's GPT: speaker conformer + perceiver latents and the two speed tokens."""

    def __init__(self, cfg: UnifiedVoiceConfig) -> None:
        super().__init__(cfg)
        if cfg.spk_conformer is None or cfg.spk_perceiver is None:
            raise ValueError("UnifiedVoice needs the speaker conformer and perceiver sizes (conformer mode)")
        self.conditioning_encoder = ConformerEncoder(cfg.spk_conformer)
        self.perceiver_encoder = PerceiverResampler(cfg.spk_perceiver)
        self._add_emotion_modules()
        self.speed_emb = nn.Embedding(2, cfg.model_dim)
        self._add_shared_modules()

    def speaker_conditioning(
        self, spk_cond_emb: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> SpeakerConditioning:
        """spk_cond_emb (B, T, C) normalised w2v-BERT layer-17 features; lengths (B,) or None (= all valid,
        what the original does for prompts up to 1024 frames)."""
        out, mask = self.conditioning_encoder(spk_cond_emb, lengths)
        latents = self.perceiver_encoder(out, mask[:, 0])
        return SpeakerConditioning(out, mask, latents)

    def speaker_latents(
        self, spk_cond_emb: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, T, C) -> (B, num_latents, D): `speech_conditioning_latent`, before the emovec is added."""
        return self.speaker_conditioning(spk_cond_emb, lengths).latents

    def conds_latent(self, spk_latents: torch.Tensor, emovec: torch.Tensor) -> torch.Tensor:
        """[spk_latents + emovec | speed_emb[1] | speed_emb[0]] -> (B, num_latents + 2, D).
        spk_latents may have batch 1 (one voice for every row)."""
        b = emovec.shape[0]
        spk = spk_latents.expand(b, -1, -1) if spk_latents.shape[0] == 1 else spk_latents
        speed = self.speed_emb.weight
        half = speed[1].expand(b, 1, -1)  # "duration_emb_half" comes first
        full = speed[0].expand(b, 1, -1)
        return torch.cat([spk + emovec[:, None, :], half, full], dim=1)

    def prefix_embeddings(
        self,
        spk_latents: torch.Tensor,
        emovec: torch.Tensor,
        text_ids: torch.Tensor,
        text_lengths: torch.Tensor | None = None,
    ) -> Prefix:
        """Stage 3.4 (see `_prefix`): [spk_latents + emovec | speed | speed | text (L+2)] per row."""
        conds = self.conds_latent(spk_latents, emovec)
        return self._prefix(conds, text_ids, text_lengths, lambda _b, ids: self.text_embeddings(ids))

    def host_tables(self) -> dict[str, torch.Tensor]:
        return {**super().host_tables(), "speed_emb": self.speed_emb.weight.detach().float()}

    def latent(
        self,
        spk_latents: torch.Tensor,
        emovec: torch.Tensor,
        text_ids: torch.Tensor,
        codes: torch.Tensor,
        code_lengths: torch.Tensor | None = None,
        text_lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced latent pass (stage 3.7, spec §2.6.7), batched.

        One pass over [prefix | start, c_0 .. c_{n-1}, stop] with mel positions 0..n+1; returns the hidden
        state (after both LayerNorms) at the mel inputs [start, c_0 .. c_{n-2}]: (B, n_max, D). Rows are
        left-padded in the prefix (masked) and right-padded after their codes (causality keeps padding
        out of the valid rows); row b's rows past code_lengths[b] are zero.
        """
        c = self.cfg
        prefix = self.prefix_embeddings(spk_latents, emovec, text_ids, text_lengths)
        b, n = codes.shape
        dev = codes.device
        steps = torch.arange(n, device=dev)[None, :]
        codes = codes.long()
        if code_lengths is not None:
            codes = torch.where(steps < code_lengths.to(dev)[:, None], codes, c.stop_mel_token)
        start = torch.full((b, 1), c.start_mel_token, dtype=torch.long, device=dev)
        stop = torch.full((b, 1), c.stop_mel_token, dtype=torch.long, device=dev)
        mel_ids = torch.cat([start, codes, stop], dim=1)
        pos = torch.arange(n + 2, device=dev)[None, :].expand(b, -1)
        x = torch.cat([prefix.embeds, self.mel_input_embedding(mel_ids, pos)], dim=1)
        mask = torch.cat([prefix.mask, torch.ones_like(mel_ids)], dim=1)
        _, hidden, _ = self.trunk(x, mask, logits_for="none")
        p = prefix.embeds.shape[1]
        lat = hidden[:, p : p + n]
        if code_lengths is not None:
            lat = lat * (steps < code_lengths.to(dev)[:, None]).unsqueeze(-1).to(lat.dtype)
        return lat


# --------------------------------------------------------------------------------------------- export


class _ConditionerGraph(nn.Module):
    """Export wrapper: (feats (B,T,C), lengths (B,) int64) -> one conditioner's output, its conformer's
    subsampling run in frequency groups (the form the exporter handles)."""

    encoder: str  # the UnifiedVoice attribute holding the conformer
    stage: str  # the UnifiedVoice method computing the output

    def __init__(self, uv: UnifiedVoiceCore) -> None:
        super().__init__()
        self.uv = uv

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        with subsampling_in_freq_groups(getattr(self.uv, self.encoder)):
            return getattr(self.uv, self.stage)(feats, lengths)


class SpeakerConditionerGraph(_ConditionerGraph):
    """-> speaker latents (B, num_latents, D)."""

    encoder, stage = "conditioning_encoder", "speaker_latents"


class EmotionConditionerGraph(_ConditionerGraph):
    """-> get_emovec (B, D). The alpha blend with the speaker's own emovec (base + alpha * (emo - base)) is
    two rows through this graph plus host math."""

    encoder, stage = "emo_conditioning_encoder", "emovec_of"


class TrunkGraph(nn.Module):
    """Export wrapper around `UnifiedVoice.trunk`.

    kv_layout "stacked": forward(inputs_embeds, attention_mask, past (L,2,B,H,Tp,Dh))
                          -> (logits, hidden, present (L,2,B,H,Tp+T,Dh))
    kv_layout "per_layer": forward(inputs_embeds, attention_mask, k_0, v_0, ..., k_{L-1}, v_{L-1})
                          -> (logits, hidden, k_0, v_0, ...), each (B,H,T,Dh)
    """

    def __init__(
        self,
        uv: UnifiedVoiceCore,
        *,
        kv_layout: Literal["stacked", "per_layer"] = "per_layer",
        logits_for: Literal["all", "last"] = "last",
    ) -> None:
        super().__init__()
        self.uv = uv
        self.kv_layout = kv_layout
        self.logits_for: LogitsFor = logits_for

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor):
        if self.kv_layout == "stacked":
            logits, hidden, present = self.uv.trunk(
                inputs_embeds, attention_mask, past[0], logits_for=self.logits_for
            )
            return logits, hidden, present
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2))
        logits, hidden, present = self.uv.trunk(
            inputs_embeds, attention_mask, pairs, logits_for=self.logits_for
        )
        return (logits, hidden, *[t for kv in present for t in kv])


# --------------------------------------------------------------------------------------------- loading


def read_gpt_state(path: Path) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
    """gpt.pth's state dict (flat, or under 'model') without the keys the spec says to ignore, and those
    keys (sorted): the known extras of the file."""
    obj = torch_load(path)
    if isinstance(obj, Mapping) and "model" in obj and isinstance(obj["model"], Mapping):
        obj = obj["model"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InputError(path, "not a UnifiedVoice state dict (flat, or under 'model')")
    extra = {k for k in obj if k.startswith(_IGNORED_PREFIXES) or _IGNORED_RE.match(k)}
    return {k: v for k, v in obj.items() if k not in extra}, tuple(sorted(extra))


def materialise(
    cls: Callable[[UnifiedVoiceConfig], UnifiedVoiceCore],
    cfg: UnifiedVoiceConfig,
    state: Mapping[str, torch.Tensor],
    path: Path,
) -> Any:
    """`cls(cfg)` with `state` loaded strictly (eval mode, float32, no grad)."""
    # Build without initialising (the checkpoint overwrites every tensor), which matters at full size.
    with torch.device("meta"):
        model = cls(cfg)
    model = model.to_empty(device="cpu")
    strict_load(model, {k: v.float() for k, v in state.items()}, path)
    return model.eval().requires_grad_(False)


def load_unified_voice(
    path: Path,
    gpt_cfg: Mapping[str, Any],
    *,
    cond_input_size: int = 1024,
    config_path: Path | str = "config.yaml",
) -> UnifiedVoice:
    """Load the official `gpt.pth` into UnifiedVoice (strict keys; eval mode, float32).

    gpt_cfg: config.yaml's `gpt` section. A missing/unexpected/misshaped key raises CheckpointKeyError
    naming the file and key; keys the spec says to ignore (`inference_model.*`, `gpt.wte.*`, GPT-2's
    causal-mask buffers) are dropped first.
    """
    path = Path(path)
    state, _ = read_gpt_state(path)
    cfg = UnifiedVoiceConfig.from_gpt_section(
        gpt_cfg, state, cond_input_size=cond_input_size, config_path=config_path
    )
    return materialise(UnifiedVoice, cfg, state, path)
