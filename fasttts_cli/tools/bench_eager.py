"""`fasttts bench`'s eager side: our PyTorch modules driven the original's way, one line at a time.

`bench_eager` runs one line of a model through the steps every version shares (loading with the
all-layer w2v-BERT, voice preparation timed cold and again, the HF-style generation at each beam count,
CFM and BigVGAN); an `EagerSide` supplies what differs: `EagerV2` here (`indextts/infer_v2.py`),
`bench_eager25.EagerV25` (`indextts/infer_v2_5.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fasttts_cli.tools import bench_common as common
from fasttts_cli.tools.bench_common import BenchOptions, StageTimes, finish_row


@dataclass
class EagerModel:
    """A checkpoint's modules for the eager side, with the reference voice loaded."""

    modules: Any  # nets.checkpoint.ModelModules (IndexTTS-2 or 2.5)
    w2v: Any  # w2v-BERT with every layer
    load_s: float
    speaker: Any  # features.SpeakerAudio
    emotion_16k: np.ndarray


def load_eager(opts: BenchOptions, load: Callable[[], Any], voice: Path) -> EagerModel:
    """`load()` the checkpoint's modules, timed, then w2v-BERT with every layer of its config, as the
    original runs it (it reads layer 17's output; our engine stops there): the eager side pays the
    original's price, as the targets are stated against it."""
    import torch

    from fasttts_cli.indextts2 import features as feat
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    torch.set_grad_enabled(False)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    t_load, m = common.timed(load)
    m.w2v_bert = None  # the 17-layer copy is not used here
    w2v = load_w2v_bert(m.paths.w2v_bert, m.paths.w2v_stat, all_layers=True)
    return EagerModel(m, w2v, t_load, feat.load_speaker_audio(voice), feat.load_emotion_audio(voice))


@dataclass(frozen=True)
class EagerVoice:
    """One prepared voice: `cond` is what the model's prefix takes (v2: speaker latents and emovec; 2.5:
    the speaker row and emovec), then the CFM's prompt condition, reference mel and style."""

    cond: tuple[Any, ...]
    prompt: Any
    mel: Any
    style: Any


class EagerSide(Protocol):
    """What one model version's eager line does its own way."""

    w2v_passes: int  # w2v-BERT runs in one voice preparation, as the original's

    def load(self, checkpoint: Path) -> Any: ...

    def voice(self, em: EagerModel) -> EagerVoice: ...

    def prefix(self, uv: Any, v: EagerVoice, text: Any) -> Any: ...

    def content(
        self, m: Any, v: EagerVoice, text: Any, codes: Any
    ) -> tuple[float | None, float, Any, dict[str, Any]]:
        """codes (1, n) -> (latent_s or None, s2mel content seconds, cond (1, Tg, C), extra row keys)."""
        ...


def w2v_features(w2v: Any, audio_16k: np.ndarray) -> Any:
    """The original's `get_emb`: SeamlessM4T features, then w2v-BERT -> normalised (1, T, 1024)."""
    import torch

    from fasttts_cli.indextts2 import features as feat

    x, mask = feat.w2v_bert_features(audio_16k)
    return w2v(torch.from_numpy(x), torch.from_numpy(mask))


def generate(uv: Any, prefix: Callable[[], Any], k: int, tokens: int) -> np.ndarray:
    """One line through `inference_speech` the HF way: the prefix (built inside, as the original does
    per line), expanded to `k` beam rows before the prefill, then `tokens` steps with a concatenating KV
    cache reordered by the beams' parents; the stop token masked (timing only). Returns the codes."""
    import torch

    from fasttts_cli.indextts2.engine import NoStopDecoder, segment_seed_generator
    from fasttts_cli.indextts2.sampling import SamplingParams

    c = uv.cfg
    pre = prefix()
    start = uv.mel_input_embedding(torch.tensor([[c.start_mel_token]]), torch.tensor([[0]]))
    x = torch.cat([pre.embeds, start], dim=1).expand(k, -1, -1)
    mask = torch.cat([pre.mask, torch.ones(1, 1, dtype=torch.long)], dim=1).expand(k, -1)
    logits, _, kv = uv.trunk(x, mask, logits_for="last")
    params = SamplingParams(beams=k, max_tokens=tokens, stop_token=c.stop_mel_token)
    d = NoStopDecoder(
        params, segment_seed_generator(0, 0), vocab=c.number_mel_codes, prefix_ids=(1, c.start_mel_token)
    )
    step = 0
    while True:
        parents, toks = d.step(logits[:, 0].numpy())
        if d.done:
            return d.result().codes
        idx = torch.from_numpy(parents)
        kv = tuple((a[idx], b[idx]) for a, b in kv)
        e = uv.mel_input_embedding(torch.from_numpy(toks)[:, None], torch.full((k, 1), step + 2))
        mask = torch.cat([mask, torch.ones(k, 1, dtype=torch.long)], dim=1)
        logits, _, kv = uv.trunk(e, mask, kv, logits_for="last")
        step += 1


def time_generation(
    out: dict[str, Any], opts: BenchOptions, uv: Any, prefix: Callable[[], Any], n: int
) -> np.ndarray:
    """prefill_s, ms_per_token and generate_s per beam count into `out`, as our side measures them (an
    untimed warm-up, 1 token, then n); returns the last run's codes."""
    for k in opts.beams:
        generate(uv, prefix, k, 3)  # untimed warm-up, as on our side
        t1, _ = common.timed(lambda k=k: generate(uv, prefix, k, 1))
        tn, codes = common.timed(lambda k=k: generate(uv, prefix, k, n))
        out["prefill_s"] = min(out.get("prefill_s", t1), t1)
        out["ms_per_token"][k] = 1000 * (tn - t1) / max(1, n - 1)
        out.setdefault("generate_s", {})[k] = tn
    return codes


def bench_eager(
    opts: BenchOptions, side: EagerSide, checkpoint: Path, voice: Path, steps: int, cfg_rate: float
) -> dict[str, Any]:
    """A model's PyTorch modules driven the original's way: one line at a time, batch 1 (beams as rows).
    The s2mel figures are scaled from `opts.s2mel_steps_timed` to `steps`."""
    import torch

    em = load_eager(opts, lambda: side.load(checkpoint), voice)
    uv = em.modules.gpt
    t_cold, _ = common.timed(lambda: side.voice(em))
    t_voice, v = common.timed(lambda: side.voice(em))
    rng = np.random.default_rng(opts.seed)
    vocab = int(uv.text_embedding.weight.shape[0])
    text = torch.tensor([common.random_text(rng, opts.text_tokens, vocab)])
    n = min(opts.tokens, uv.cfg.mel_pos_rows - 2)
    out: dict[str, Any] = {
        "load_s": em.load_s,
        "voice_prep_cold_s": t_cold,
        "voice_prep_s": t_voice,
        "w2v_layers_run": em.w2v.depth,
        "w2v_passes": side.w2v_passes,
        "tokens": n,
        "ms_per_token": {},
    }
    codes = time_generation(out, opts, uv, lambda: side.prefix(uv, v, text), n)
    t_lat, t_content, cond, extra = side.content(em.modules, v, text, torch.from_numpy(codes)[None])
    return _finish_line(out, opts, em.modules, v, cond, (t_lat, t_content), steps, cfg_rate, **extra)


def _finish_line(
    out: dict[str, Any],
    opts: BenchOptions,
    m: Any,
    v: EagerVoice,
    cond: Any,
    before: tuple[float | None, float],
    steps: int,
    cfg_rate: float,
    **extra: Any,
) -> dict[str, Any]:
    """CFM on [prompt condition | cond] (`opts.s2mel_steps_timed` steps, scaled to `steps`) and BigVGAN
    on the generated frames, then the row totals. before = (latent_s or None, s2mel content seconds)."""
    import torch

    prompt, mel, style = v.prompt, v.mel, v.style
    cat = torch.cat([prompt, cond], dim=1)
    t_len = cat.shape[1]
    z = torch.randn(1, 80, t_len, generator=torch.Generator().manual_seed(opts.seed))
    x_lens = torch.tensor([t_len])
    t_cfm, (x, _) = common.timed(
        lambda: m.s2mel.cfm.solve(
            cat, x_lens, mel, torch.tensor([mel.shape[-1]]), style, z, opts.s2mel_steps_timed, cfg_rate
        )
    )
    t_voc, wav = common.timed(lambda: m.bigvgan(x[:, :, mel.shape[-1] :]))
    t = StageTimes(before[0], before[1], t_cfm, t_len, t_voc, wav.shape[-1] / common.SR_OUT)
    return finish_row(
        out,
        opts.beams,
        1,
        steps,
        opts.s2mel_steps_timed,
        t,
        tokens=out["tokens"],
        peak_rss_mb=common.peak_rss_mb(),
        **extra,
    )


class EagerV2:
    """IndexTTS-2 (`indextts/infer_v2.py`): the speaker conditioner, the codec-quantised prompt, the
    latent pass and vq2emb before the content stage."""

    w2v_passes = 2  # speaker, emotion

    def load(self, checkpoint: Path) -> Any:
        from fasttts_cli.nets.checkpoint import load_checkpoint

        return load_checkpoint(checkpoint)

    def voice(self, em: EagerModel) -> EagerVoice:
        import torch

        from fasttts_cli.indextts2 import features as feat

        m, speaker, uv = em.modules, em.speaker, em.modules.gpt
        spk = w2v_features(em.w2v, speaker.audio_16k)
        emo = w2v_features(em.w2v, em.emotion_16k)
        _, _, s_ref = m.codec.quantize(spk)
        mel = torch.from_numpy(feat.log_mel(speaker.audio_22k))[None]
        _, fb = feat.campplus_fbank(speaker.audio_16k)
        style = m.campplus(torch.from_numpy(fb)[None])
        tm = torch.tensor([mel.shape[-1]])
        prompt = m.s2mel.length_regulator(s_ref, torch.tensor([s_ref.shape[1]]), tm)
        lat = uv.speaker_latents(spk)
        emovec = uv.emotion_conditioning(emo, spk, 1.0).emovec
        return EagerVoice((lat, emovec), prompt, mel, style)

    def prefix(self, uv: Any, v: EagerVoice, text: Any) -> Any:
        return uv.prefix_embeddings(*v.cond, text)

    def content(
        self, m: Any, v: EagerVoice, text: Any, codes: Any
    ) -> tuple[float | None, float, Any, dict[str, Any]]:
        import torch

        t_lat, latent = common.timed(lambda: m.gpt.latent(*v.cond, text, codes))
        lens = torch.tensor([codes.shape[1]])
        t_content, (cond, _) = common.timed(lambda: m.s2mel.content(latent, m.codec.vq2emb(codes), lens))
        return t_lat, t_content, cond, {}
