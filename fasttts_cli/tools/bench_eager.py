"""`fasttts bench`'s eager side: our PyTorch modules driven the original's way, one line at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.tools import bench_common as common
from fasttts_cli.tools.bench_common import BenchOptions, StageTimes, finish_row


def bench_eager(
    opts: BenchOptions, checkpoint: Path, voice: Path, steps: int, cfg_rate: float
) -> dict[str, Any]:
    """Our PyTorch modules driven the original's way: one line at a time, batch 1 (beams as rows)."""
    import torch

    from fasttts_cli.indextts2 import features as feat
    from fasttts_cli.indextts2.engine import NoStopDecoder, segment_seed_generator
    from fasttts_cli.indextts2.sampling import SamplingParams
    from fasttts_cli.nets.checkpoint import CheckpointPaths, load_checkpoint, load_config
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    torch.set_grad_enabled(False)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    t_load, m = common.timed(lambda: load_checkpoint(checkpoint))
    uv, s2 = m.gpt, m.s2mel
    # The original runs every w2v-BERT layer (24 as released) and reads layer 17's output; our engine
    # stops at 17. The eager side pays the original's price, as the targets are stated against it.
    m.w2v_bert = None  # the 17-layer copy is not used here
    paths = CheckpointPaths(Path(checkpoint))
    rp = paths.resolve(load_config(paths.config_path))
    w2v_all = load_w2v_bert(rp.w2v_bert, rp.w2v_stat, all_layers=True)
    speaker = feat.load_speaker_audio(voice)
    emo16 = feat.load_emotion_audio(voice)

    def voice_prep() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        def w2v(a16: np.ndarray) -> torch.Tensor:
            x, mask = feat.w2v_bert_features(a16)
            return w2v_all(torch.from_numpy(x), torch.from_numpy(mask))

        spk = w2v(speaker.audio_16k)
        emo = w2v(emo16)
        _, _, s_ref = m.codec.quantize(spk)
        mel = torch.from_numpy(feat.log_mel(speaker.audio_22k))[None]
        _, fb = feat.campplus_fbank(speaker.audio_16k)
        style = m.campplus(torch.from_numpy(fb)[None])
        tm = torch.tensor([mel.shape[-1]])
        prompt = s2.length_regulator(s_ref, torch.tensor([s_ref.shape[1]]), tm)
        lat = uv.speaker_latents(spk)
        emovec = uv.emotion_conditioning(emo, spk, 1.0).emovec
        return lat, emovec, style, mel, prompt

    t_cold, _ = common.timed(voice_prep)
    t_voice, (lat, emovec, style, mel, prompt) = common.timed(voice_prep)
    rng = np.random.default_rng(opts.seed)
    vocab = int(uv.text_embedding.weight.shape[0])
    text = torch.tensor([common.random_text(rng, opts.text_tokens, vocab)])
    n = min(opts.tokens, uv.cfg.mel_pos_rows - 2)
    c = uv.cfg
    out: dict[str, Any] = {
        "load_s": t_load,
        "voice_prep_cold_s": t_cold,
        "voice_prep_s": t_voice,
        "w2v_layers_run": w2v_all.depth,
        "tokens": n,
        "ms_per_token": {},
    }

    def generate(k: int, tokens: int) -> np.ndarray:
        pre = uv.prefix_embeddings(lat, emovec, text)
        start = uv.mel_input_embedding(torch.tensor([[c.start_mel_token]]), torch.tensor([[0]]))
        x = torch.cat([pre.embeds, start], dim=1).expand(k, -1, -1)  # HF expands to beams before prefill
        mask = torch.ones(k, x.shape[1], dtype=torch.long)
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

    for k in opts.beams:
        generate(k, 3)  # untimed warm-up, as on our side
        t1, _ = common.timed(lambda k=k: generate(k, 1))
        tn, codes = common.timed(lambda k=k: generate(k, n))
        out["prefill_s"] = min(out.get("prefill_s", t1), t1)
        out["ms_per_token"][k] = 1000 * (tn - t1) / max(1, n - 1)
        out.setdefault("generate_s", {})[k] = tn
    codes_t = torch.from_numpy(codes)[None]
    t_lat, latent = common.timed(lambda: uv.latent(lat, emovec, text, codes_t))
    lens = torch.tensor([codes_t.shape[1]])

    def content() -> tuple[torch.Tensor, torch.Tensor]:
        vq = m.codec.vq2emb(codes_t)
        return s2.content(latent, vq, lens)

    t_content, (cond, _) = common.timed(content)
    cat = torch.cat([prompt, cond], dim=1)
    t_len = cat.shape[1]
    z = torch.randn(1, 80, t_len, generator=torch.Generator().manual_seed(opts.seed))
    x_lens = torch.tensor([t_len])
    t_cfm, (x, _) = common.timed(
        lambda: s2.cfm.solve(
            cat, x_lens, mel, torch.tensor([mel.shape[-1]]), style, z, opts.s2mel_steps_timed, cfg_rate
        )
    )
    t_voc, wav = common.timed(lambda: m.bigvgan(x[:, :, mel.shape[-1] :]))
    t = StageTimes(t_lat, t_content, t_cfm, t_len, t_voc, wav.shape[-1] / common.SR_OUT)
    return finish_row(
        out, opts.beams, 1, steps, opts.s2mel_steps_timed, t, tokens=n, peak_rss_mb=common.peak_rss_mb()
    )
