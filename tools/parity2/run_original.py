#!/usr/bin/env python3
"""Run the ORIGINAL IndexTTS-2 (indextts.infer_v2) on CPU fp32, stage by stage, and store the vectors.

    /tmp/ref2/bin/python run_original.py CKPT OUTDIR [--orig /tmp/orig2]

CKPT is made by make_checkpoint.py (seed 0). Writes OUTDIR/vectors_s0.{npz,json} (main case: speaker and
emotion from ref.wav) and OUTDIR/vectors_s0_emo.{npz,json} (emo.wav at emo_alpha 0.6, another text; only
the arrays that differ, the rest named in `same_as_base`). Key names, shapes and seeds are those of the
vector format described in README.md, so the tests read either set.

Every stage calls the original's own objects (the constructed IndexTTS2 and its modules) in the order
infer_generator calls them (infer_v2.py:440-660); forward hooks read the intermediates. Generation is
teacher-forced through the original inference_speech + HF generate (prefix_allowed_tokens_fn), and an
end-to-end IndexTTS2.infer with the same forcing and noise must reproduce the staged waveform.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# The 2.5 oracle's generic helpers (vector store, logits-processor stage, emotion-vector stage) are the same
# for v2: both call the original's shared model_v2 / HF generate code.
sys.path.insert(0, os.path.join(HERE, "..", "parity25"))
from run_original25 import (  # noqa: E402
    EMO_WEIGHTS,
    INFER_DEFAULTS,
    Store,
    emotion_vector_stage,
    processor_stage,
    rel,
)
from run_original25 import Forced as Forced25  # noqa: E402

CASES = {
    "vectors_s0": {
        "text": "Hello world. 你好世界，this is a small test!",
        "emotion_wav": None,
        "emo_alpha": 1.0,
    },
    "vectors_s0_emo": {
        "text": "It's quite ready, isn't it? The quick brown fox.",
        "emotion_wav": "emo.wav",
        "emo_alpha": 0.6,
    },
}
N_CODES = 20
FORCED_SEED = 0  # numpy default_rng(0).integers(0, 8192, 20)
CFM_SEED = 1000003  # torch.manual_seed right before cfm.inference draws its start noise
DIT_SEED = 2000003  # torch.Generator for the single-call DiT input
MAX_TOKENS = 120
# the delta set does not repeat the per-step CFM arrays (a diagnostic for locating a divergence); its DiT
# unit tests (stages 4.2, 4.3) run on its own condition, so every test runs on both sets, none skips
NOT_REPEATED = ("cfm_step_",)
SRC_FILES = (
    "indextts/infer_v2.py",
    "indextts/gpt/model_v2.py",
    "indextts/s2mel/modules/flow_matching.py",
    "indextts/utils/front.py",
)


class Forced(Forced25):
    """inference_speech as infer_v2 calls it (the emotion features land in the `langs` slot, unused in v2),
    with HF generate forced to the given codes by prefix_allowed_tokens_fn (the 2.5 oracle's `allowed` and
    `processors`); this `run` also records the prefix and the normed hidden states."""

    def _speech(self, spk_cond_emb, text_tokens, emo_cond_emb, emovec, **kw):
        import torch

        return self.gpt.inference_speech(
            spk_cond_emb,
            text_tokens,
            emo_cond_emb,
            cond_lengths=torch.tensor([spk_cond_emb.shape[-1]]),
            emo_cond_lengths=torch.tensor([emo_cond_emb.shape[-1]]),
            emo_vec=emovec,
            **INFER_DEFAULTS,
            **kw,
        )

    def run(self, *inputs):
        """-> codes, speech latent, prepare_gpt_inputs' (args, outputs), (n+1, V) logits, final_norm rows
        (prefill: all positions; then the last position of each step)."""
        import torch

        logits, normed, prep = [], [], {}
        head = self.gpt.inference_model.lm_head
        hs = [
            head.register_forward_hook(lambda m, i, o: logits.append(o[0, -1].clone())),
            head[0].register_forward_hook(lambda m, i, o: normed.append(o[0].clone())),
        ]
        orig = self.gpt.prepare_gpt_inputs

        def spy(*a, **k):
            out = orig(*a, **k)
            prep.update(args=a, out=out)
            return out

        self.gpt.prepare_gpt_inputs = spy
        try:
            codes, latent = self._speech(
                *inputs, num_beams=1, max_generate_length=self.n + 1, prefix_allowed_tokens_fn=self.allowed
            )
        finally:
            self.gpt.prepare_gpt_inputs = orig
            for h in hs:
                h.remove()
        return codes, latent, prep, torch.stack(logits[: self.n + 1]), normed[: self.n + 1]


def check(checks, name, value, ok):
    checks[name] = {"value": value, "ok": bool(ok)}


def verify_loaded(tts, ckpt):
    """Every tensor of every checkpoint file against the loaded modules (strict both ways)."""
    import torch
    from safetensors.torch import load_file

    bad = []

    def cmp(name, module_sd, file_sd, alias=lambda k: False):
        for k, v in file_sd.items():
            if (
                k not in module_sd
                or module_sd[k].shape != v.shape
                or not torch.equal(module_sd[k].float(), v.float())
            ):
                bad.append(f"{name}:{k}")
        bad.extend(f"{name}:{k} (not in file)" for k in set(module_sd) - set(file_sd) if not alias(k))

    def hf(rel_path):
        return os.path.join(ckpt, "hf_cache", rel_path)

    # post_init_gpt2_config adds aliases of loaded modules (inference_model.*, the tied gpt.wte)
    gpt_alias = lambda k: k.startswith("inference_model.") or k == "gpt.wte.weight"  # noqa: E731
    cmp("gpt.pth", tts.gpt.state_dict(), torch.load(os.path.join(ckpt, "gpt.pth")), gpt_alias)
    s2 = torch.load(os.path.join(ckpt, "s2mel.pth"))["net"]
    for m in ("cfm", "length_regulator", "gpt_layer"):
        cmp(f"s2mel.pth:{m}", tts.s2mel.models[m].state_dict(), s2[m])
    cmp("codec", tts.semantic_codec.state_dict(), load_file(hf("semantic_codec_model.safetensors")))
    cmp("campplus", tts.campplus_model.state_dict(), torch.load(hf("campplus_cn_common.bin")))
    cmp("w2v-bert", tts.semantic_model.state_dict(), load_file(hf("w2v-bert-2.0/model.safetensors")))
    # BigVGAN is stored with weight norm and folded at load (remove_weight_norm): compare the folded weights
    bv = torch.load(hf("bigvgan/bigvgan_generator.pt"))["generator"]
    bsd = tts.bigvgan.state_dict()
    folded = {k[: -len("_g")] for k in bv if k.endswith("weight_g")}
    for base in folded:
        v = bv[base + "_v"]
        w = bv[base + "_g"] * v / v.norm(dim=list(range(1, v.dim())), keepdim=True)
        if rel(bsd[base], w) > 1e-6:
            bad.append(f"bigvgan:{base} (folded)")
    plain = {k: v for k, v in bv.items() if not k.endswith(("weight_g", "weight_v"))}
    cmp("bigvgan", bsd, plain, lambda k: k in folded)
    st = torch.load(os.path.join(ckpt, "wav2vec2bert_stats.pt"))
    if not (
        torch.equal(tts.semantic_mean, st["mean"]) and torch.equal(tts.semantic_std, torch.sqrt(st["var"]))
    ):
        bad.append("wav2vec2bert_stats.pt")
    f1, f2 = torch.load(os.path.join(ckpt, "feat1.pt")), torch.load(os.path.join(ckpt, "feat2.pt"))
    if not (torch.equal(torch.cat(tts.spk_matrix), f1) and torch.equal(torch.cat(tts.emo_matrix), f2)):
        bad.append("feat1/feat2")
    return bad


def speaker_stages(S, checks, tts, ref):
    """Stages 1.1-1.7 as infer_generator's speaker branch (infer_v2.py:444-478)."""
    import librosa
    import torch
    import torchaudio

    native, native_sr = librosa.load(ref, sr=None)
    S.put("audio_native", native, "1.1", "output", "librosa.load(ref.wav, sr=None): native rate, mono")
    S.put("audio_native_sr", np.array(native_sr), "1.1", "output")
    audio, sr = tts._load_and_cut_audio(ref, 15)
    audio_22k = torchaudio.transforms.Resample(sr, 22050)(audio)
    audio_16k = torchaudio.transforms.Resample(sr, 16000)(audio)
    S.put("audio_22k", audio_22k, "1.1", "both", "librosa.load(sr=22050) cut to 15 s, Resample(sr, 22050)")
    S.put("audio_16k", audio_16k, "1.1", "both", "torchaudio Resample(22050 -> 16000) of the loaded audio")
    inputs = tts.extract_features(audio_16k, sampling_rate=16000, return_tensors="pt")
    S.put("w2v_input_features", inputs["input_features"], "1.2", "both")
    S.put("w2v_attention_mask", inputs["attention_mask"], "1.2", "both")
    out = tts.semantic_model(
        input_features=inputs["input_features"],
        attention_mask=inputs["attention_mask"],
        output_hidden_states=True,
    )
    S.put("w2v_hidden0", out.hidden_states[0], "1.3", "output")
    S.put("w2v_hidden17_raw", out.hidden_states[17], "1.3", "output")
    S.put("w2v_stat_mean", tts.semantic_mean, "1.3", "output")
    S.put("w2v_stat_std", tts.semantic_std, "1.3", "output", "sqrt(var), no epsilon")
    spk_cond_emb = tts.get_emb(inputs["input_features"], inputs["attention_mask"])
    S.put("spk_cond_emb", spk_cond_emb, "1.3", "both", "(1, T, 1024) (hidden17 - mean) / std")

    fvq = tts.semantic_codec.quantizer.quantizers[0]
    rec = []
    h = fvq.register_forward_hook(lambda m, i, o: rec.append(o[4].clone()))
    indices, S_ref = tts.semantic_codec.quantize(spk_cond_emb)
    h.remove()
    z_e = rec[0]
    S.put("codec_ref_z_e", z_e, "1.4", "output", "(1, 8, T) in_project output before the code search")
    S.put("codec_ref_indices", indices, "1.4", "output", "RepCodec.quantize indices (as returned)")
    # the code search's own distance (decode_latents), best minus second best: the near-tie margin
    enc = torch.nn.functional.normalize(z_e[0].T)
    cb = torch.nn.functional.normalize(fvq.codebook.weight)
    dist = enc.pow(2).sum(1, keepdim=True) - 2 * enc @ cb.t() + cb.pow(2).sum(1, keepdim=True).t()
    top = torch.topk(-dist, 2, dim=1).values
    margin = top[:, 0] - top[:, 1]
    S.put("codec_ref_margin", margin, "-", "info", "(T,) best minus second-best -distance per frame")
    check(checks, "codec_ref_min_margin", float(margin.min()), float(margin.min()) > 0)
    S.put("codec_S_ref", S_ref, "1.4", "both", "(1, T, 1024) quantized embedding = S_ref")

    ref_mel = tts.mel_fn(audio_22k.float())
    S.put("refmel", ref_mel, "1.5", "both")
    fb = torchaudio.compliance.kaldi.fbank(audio_16k, num_mel_bins=80, dither=0, sample_frequency=16000)
    S.put("campplus_fbank_raw", fb, "1.6", "output")
    fb = fb - fb.mean(dim=0, keepdim=True)
    S.put("campplus_fbank", fb, "1.6", "output")
    style = tts.campplus_model(fb.unsqueeze(0))
    S.put("campplus_style", style, "1.6", "both", "(1, 192) CAMPPlus style")
    prompt_condition = tts.s2mel.models["length_regulator"](
        S_ref, ylens=torch.LongTensor([ref_mel.size(2)]), n_quantizers=3, f0=None
    )[0]
    S.put("prompt_condition", prompt_condition, "1.7", "both", "length_regulator(S_ref, ylens=[Tm])")
    return spk_cond_emb, style, prompt_condition, ref_mel


def emotion_audio_stages(S, tts, wav):
    """Stages 1.8-1.10: the emotion path loads straight at 16 kHz (infer_v2.py:498-511)."""
    emo_audio, _ = tts._load_and_cut_audio(wav, 15, sr=16000)
    S.put("audio_emo_16k", emo_audio, "1.8", "both", "librosa.load(sr=16000) cut to 15 s")
    ei = tts.extract_features(emo_audio, sampling_rate=16000, return_tensors="pt")
    S.put("w2v_emo_input_features", ei["input_features"], "1.9", "both")
    S.put("w2v_emo_attention_mask", ei["attention_mask"], "1.9", "both")
    emo_cond_emb = tts.get_emb(ei["input_features"], ei["attention_mask"])
    S.put("emo_cond_emb", emo_cond_emb, "1.10", "both")
    return emo_cond_emb


def text_stage(S, tts, text):
    """Stage 2: TextTokenizer.tokenize (normalise, CJK split + upper case, SentencePiece), split_segments."""
    import torch
    from indextts.utils.common import tokenize_by_CJK_char

    tok = tts.tokenizer
    normalized = tok.normalizer.normalize(text)
    S.put("text_input", np.array(text), "-", "info")
    S.put("text_normalized", np.array(normalized), "-", "input", "normalize() with WeText as the identity")
    S.put("text_pretokenized", np.array(tokenize_by_CJK_char(normalized)), "2", "output")
    pieces = tok.tokenize(text)
    S.put("text_pieces", np.array(pieces), "2", "output")
    S.put("text_ids", np.array(tok.convert_tokens_to_ids(pieces)), "2", "output")
    segs = tok.split_segments(pieces, MAX_TOKENS, quick_streaming_tokens=0)
    S.put("text_segment_lengths", np.array([len(s) for s in segs]), "2", "output")
    S.put(
        "text_segment_ids", np.array([i for s in segs for i in tok.convert_tokens_to_ids(s)]), "2", "output"
    )
    ids = torch.tensor(tok.convert_tokens_to_ids(segs[0]), dtype=torch.int32).unsqueeze(0)
    S.put("gpt_text_ids", ids, "2", "both", "(1, L) segment 0 (int32 in the original)")
    return ids, len(segs)


def emotion_stage(S, gpt, spk_cond_emb, emo_cond_emb, alpha):
    """Stage 3.1: merge_emovec as infer_generator calls it; it runs the conditioner on the emotion audio
    first, then on the speaker audio (the base vector)."""
    import torch

    rec = {}

    def hook(name):
        return lambda m, i, o: rec.setdefault(name, []).append(o)

    hs = [
        gpt.emo_conditioning_encoder.register_forward_hook(hook("conformer")),
        gpt.emo_perceiver_encoder.register_forward_hook(hook("perceiver")),
        gpt.emovec_layer.register_forward_hook(hook("emovec_layer")),
        gpt.emo_layer.register_forward_hook(hook("emo_layer")),
    ]
    lens = (torch.tensor([spk_cond_emb.shape[-1]]), torch.tensor([emo_cond_emb.shape[-1]]))
    emovec = gpt.merge_emovec(spk_cond_emb, emo_cond_emb, *lens, alpha=alpha)
    for h in hs:
        h.remove()
    S.put("emo_conformer_out", rec["conformer"][0][0], "3.1", "output")
    S.put("emo_conformer_mask", rec["conformer"][0][1], "3.1", "output")
    S.put("emo_perceiver_out", rec["perceiver"][0], "3.1", "output")
    S.put("emo_emovec_layer_out", rec["emovec_layer"][0], "3.1", "output")
    S.put("emovec_emo", rec["emo_layer"][0], "3.1", "output")
    S.put("emo_base_conformer_out", rec["conformer"][1][0], "3.1", "output")
    S.put("emovec_base", rec["emo_layer"][1], "3.1", "output")
    S.put("emovec", emovec, "3.1", "both", f"merge_emovec, alpha {alpha}")
    return emovec


def speaker_conditioner_stage(S, gpt, spk_cond_emb):
    """Stage 3.2: get_conditioning (conformer + perceiver), lengths = the feature size as infer passes."""
    import torch

    rec = []
    h = gpt.conditioning_encoder.register_forward_hook(lambda m, i, o: rec.append(o))
    latents = gpt.get_conditioning(spk_cond_emb.transpose(1, 2), torch.tensor([spk_cond_emb.shape[-1]]))
    h.remove()
    S.put("spk_conformer_out", rec[0][0], "3.2", "output")
    S.put("spk_conformer_mask", rec[0][1], "3.2", "output")
    S.put("spk_latents", latents, "3.2", "both", "(1, 32, 1280)")
    return latents


def gpt_stages(S, checks, tts, spk_cond_emb, emo_cond_emb, emovec, text_ids, spk_latents, forced, base):
    """Stages 3.4-3.7: prefix, forced generation path, processors, teacher-forced latent pass."""
    import torch

    gpt = tts.gpt
    L, n = text_ids.shape[1], len(forced)
    gen = Forced(gpt, forced, 34 + L + 2 + 1)
    inputs = (spk_cond_emb, text_ids, emo_cond_emb, emovec)
    codes, latent_in, prep, logits, normed = gen.run(*inputs)
    check(checks, "gpt_forced_sequence_generated", bool(np.array_equal(codes[0, :n].numpy(), forced)), True)
    check(
        checks,
        "spk_latents_equal_inference_speech",
        rel(latent_in, spk_latents),
        rel(latent_in, spk_latents) == 0,
    )
    conds = prep["args"][0]
    fake_ids, prefix, attn = prep["out"]
    S.put("gpt_conds_latent", conds, "3.4", "output", "[spk_latents + emovec | speed_emb[1] | speed_emb[0]]")
    gid = torch.cat(
        [torch.tensor([gpt.start_text_token]), text_ids[0].long(), torch.tensor([gpt.stop_text_token])]
    )
    text_emb = gpt.text_embedding(gid) + gpt.text_pos_embedding.emb(torch.arange(len(gid)))
    S.put("gpt_text_emb", text_emb.unsqueeze(0), "3.4", "output", "text_embedding([0, ids, 1]) + pos")
    S.put("gpt_prefix_emb", prefix, "3.4", "both", "(1, P = 34 + L + 2, D)")
    head_rel = rel(prefix[:, : conds.shape[1]], conds)
    check(checks, "prefix_head_equals_conds_latent", head_rel, head_rel == 0)
    S.put("gpt_gen_input_ids", fake_ids, "-", "input", "P ones then start_mel_token")
    S.put("gpt_gen_attention_mask", attn, "-", "info")
    if base:
        S.put(
            "gpt_forced_codes",
            forced,
            "-",
            "input",
            f"numpy default_rng({FORCED_SEED}).integers(0, 8192, {n})",
        )
    S.put("gpt_gen_logits", logits, "3.5", "both", "(n+1, V) raw logits of each generate step (KV cache)")
    S.put("gpt_prefill_hidden", normed[0], "3.5", "output", "(P+1, D) final_norm(ln_f(h)), prefill step")
    hid = torch.stack([normed[0][-1], *[r[-1] for r in normed[1:]]])
    S.put("gpt_gen_hidden", hid, "3.5", "output", "(n+1, D) final_norm(ln_f(h)) at each step's last position")
    # the same steps without a cache: mel positions 0 (start) and k+2 (code k)
    mel_in = torch.cat([torch.tensor([gpt.start_mel_token]), torch.tensor(forced)])
    pos = torch.cat([torch.tensor([0]), torch.arange(2, n + 2)])
    mel_emb = gpt.mel_embedding(mel_in) + gpt.mel_pos_embedding.emb(pos)
    full = torch.cat([prefix, mel_emb.unsqueeze(0)], 1)
    h = gpt.gpt(
        inputs_embeds=full, attention_mask=torch.ones(1, full.shape[1], dtype=torch.long)
    ).last_hidden_state
    nocache = gpt.mel_head(gpt.final_norm(h[:, prefix.shape[1] :]))[0]
    r = rel(nocache, logits)
    check(checks, "gen_logits_nocache_positions_0_2_3_rel_err", r, r < 1e-5)
    processor_stage(S, checks, gen, inputs, logits.unsqueeze(0), fake_ids, "")
    for k, v in list(checks.items()):  # the 2.5 helper writes bare values: margins must be positive
        if not (isinstance(v, dict) and "ok" in v):
            checks[k] = {"value": v, "ok": not isinstance(v, float) or v > 0}
    latent = gpt(
        spk_latents,
        text_ids,
        torch.tensor([L]),
        torch.tensor(forced).unsqueeze(0),
        torch.tensor([n]),
        emo_cond_emb,
        cond_mel_lengths=torch.tensor([spk_cond_emb.shape[-1]]),
        emo_cond_mel_lengths=torch.tensor([emo_cond_emb.shape[-1]]),
        emo_vec=emovec,
        use_speed=torch.zeros(1).long(),
    )
    S.put("gpt_latent", latent, "3.7", "both", "(1, n, D) UnifiedVoice.forward on the forced codes")
    return gen, latent


def s2mel_stages(S, checks, tts, latent, forced, prompt_condition, ref_mel, style, full):
    """Stages 4.1-4.4 and 5 (infer_v2.py:626-650); `full` adds the per-step CFM and DiT unit vectors."""
    import torch

    codes = torch.tensor(forced).unsqueeze(0)
    gl = tts.s2mel.models["gpt_layer"](latent)
    S.put("s2mel_gpt_layer_out", gl, "4.1", "output")
    vq = tts.semantic_codec.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)
    S.put("s2mel_vq2emb", vq, "4.1", "output")
    S_infer = vq + gl
    S.put("s2mel_S_infer", S_infer, "4.1", "output")
    tl = (torch.LongTensor([len(forced)]) * 1.72).long()
    S.put("s2mel_target_len", tl, "4.1", "output", "floor(n * 1.72)")
    cond = tts.s2mel.models["length_regulator"](S_infer, ylens=tl, n_quantizers=3, f0=None)[0]
    S.put("s2mel_cond", cond, "4.1", "output")
    cat = torch.cat([prompt_condition, cond], dim=1)
    S.put("s2mel_cat_condition", cat, "4.1", "both", "cat(prompt_condition, cond) = CFM mu")
    cfm = tts.s2mel.models["cfm"]
    z_rec, calls = {}, []
    orig_solve = cfm.solve_euler

    def solve(x, *a, **k):
        z_rec["z"] = x.clone()  # solve_euler zeroes the prompt region of x in place
        return orig_solve(x, *a, **k)

    cfm.solve_euler = solve
    dh = cfm.estimator.register_forward_hook(
        lambda m, i, o: calls.append(([t.clone() if torch.is_tensor(t) else t for t in i], o.clone()))
    )
    torch.manual_seed(CFM_SEED)
    out = cfm.inference(
        cat, torch.LongTensor([cat.size(1)]), ref_mel, style, None, 25, inference_cfg_rate=0.7
    )
    dh.remove()
    cfm.solve_euler = orig_solve
    Tm, T = ref_mel.size(-1), cat.size(1)
    x0 = calls[0][0][0][0]
    check(
        checks,
        "cfm_z_used_exactly",
        "estimator step-1 x == saved z (prompt region zeroed)",
        torch.equal(x0[..., Tm:], z_rec["z"][0, :, Tm:]) and not x0[..., :Tm].any(),
    )
    if full:
        S.put(
            "cfm_z", z_rec["z"], "-", "input", f"torch.manual_seed({CFM_SEED}); the noise cfm.inference draws"
        )
        S.put("cfm_t_span", torch.linspace(0, 1, 26), "-", "info")
        S.put("cfm_inference_cfg_rate", np.array(0.7, np.float32), "-", "info")
        S.put("cfm_n_estimator_calls", np.array(len(calls)), "-", "info")
        S.put("cfm_step_t", torch.stack([c[0][3][0] for c in calls]), "4.4", "output")
        S.put("cfm_step_x", torch.stack([c[0][0][0] for c in calls]), "4.4", "output")
        S.put(
            "cfm_step_v", torch.stack([c[1] for c in calls]), "4.4", "output", "(25, 2, 80, T) [cond, uncond]"
        )
    S.put("cfm_out_full", out, "4.4", "output")
    mel = out[:, :, Tm:]
    S.put("cfm_mel", mel, "4.4", "both")
    if full:
        est = cfm.estimator
        g = torch.Generator().manual_seed(DIT_SEED)
        x = torch.randn(2, 80, T, generator=g)
        px = torch.zeros(2, 80, T)
        px[0, :, :Tm] = ref_mel[0]
        t2 = torch.tensor([0.28, 0.64])
        st = torch.cat([style, torch.zeros_like(style)])
        cc = torch.cat([cat, torch.zeros_like(cat)])
        xl = torch.LongTensor([T])
        for k, v in (("x", x), ("prompt_x", px), ("x_lens", xl), ("t", t2), ("style", st), ("cond", cc)):
            S.put(f"dit_in_{k}", v, "-", "input")
        S.put("dit_out", est(x, px, xl, t2, st, cc), "4.2", "output")
        ml, mt = torch.LongTensor([T, T - 13]), torch.tensor([0.5, 0.5])
        S.put("ditm_in_x_lens", ml, "-", "input", "per-row lengths [T, T-13]")
        S.put("ditm_in_t", mt, "-", "input")
        two = lambda a: torch.cat([a[:1], a[:1]])  # noqa: E731
        S.put("ditm_out", est(x, two(px), ml, mt, two(st), two(cat)), "4.3", "output", "valid [:x_lens[b]]")
    wav = tts.bigvgan(mel.float()).squeeze().unsqueeze(0)
    S.put("bigvgan_wav", wav.unsqueeze(0), "5", "output", "(1, 1, 256 Tg)")
    S.put("wav_int16", torch.clamp(32767 * wav, -32767.0, 32767.0).type(torch.int16), "5", "output")
    if full:
        S.put("wav_sr", np.array(22050), "-", "info")


def run_case(tts, ckpt, spec):
    """One case: its Store, checks and case description."""
    import torch

    S, checks = Store(), {}
    ref = os.path.join(ckpt, "ref.wav")
    emo = os.path.join(ckpt, spec["emotion_wav"]) if spec["emotion_wav"] else ref
    alpha = spec["emo_alpha"]
    forced = np.random.default_rng(FORCED_SEED).integers(0, 8192, N_CODES).astype(np.int64)
    with torch.no_grad():
        spk_cond_emb, style, prompt_condition, ref_mel = speaker_stages(S, checks, tts, ref)
        emo_cond_emb = emotion_audio_stages(S, tts, emo)
        text_ids, n_segments = text_stage(S, tts, spec["text"])
        S.put("gpt_cond_lengths", np.array([spk_cond_emb.shape[-1]]), "-", "info", "= 1024: nothing masked")
        emovec = emotion_stage(S, tts.gpt, spk_cond_emb, emo_cond_emb, alpha)
        spk_latents = speaker_conditioner_stage(S, tts.gpt, spk_cond_emb)
        emotion_vector_stage(S, checks, tts, sys.modules["indextts.infer_v2"], style, emovec)
        gen, latent = gpt_stages(
            S, checks, tts, spk_cond_emb, emo_cond_emb, emovec, text_ids, spk_latents, forced, True
        )
        s2mel_stages(S, checks, tts, latent, forced, prompt_condition, ref_mel, style, True)
    # end to end: IndexTTS2.infer with the same forcing and CFM noise reproduces the staged waveform
    cfm = tts.s2mel.models["cfm"]
    orig_inf = cfm.inference

    def seeded(*a, **k):
        torch.manual_seed(CFM_SEED)
        return orig_inf(*a, **k)

    cfm.inference = seeded
    try:
        _, data = tts.infer(
            ref,
            spec["text"],
            None,
            emo_audio_prompt=spec["emotion_wav"] and emo,
            emo_alpha=alpha,
            num_beams=1,
            max_mel_tokens=N_CODES + 1,
            prefix_allowed_tokens_fn=gen.allowed,
        )
    finally:
        cfm.inference = orig_inf
    d = int(np.abs(data[:, 0].astype(np.int64) - S.arrays["wav_int16"][0].astype(np.int64)).max())
    cached = (
        tts.cache_spk_cond,
        tts.cache_s2mel_style,
        tts.cache_s2mel_prompt,
        tts.cache_mel,
        tts.cache_emo_cond,
    )
    staged = (spk_cond_emb, style, prompt_condition, ref_mel, emo_cond_emb)
    names = ("spk_cond_emb", "style", "prompt_condition", "ref_mel", "emo_cond_emb")
    # infer() computes the speaker branch outside no_grad: detach before comparing
    caches = {k: rel(c.detach(), s) for k, c, s in zip(names, cached, staged, strict=True)}
    check(
        checks,
        "e2e_infer_matches_stages",
        {"wav_int16_max_abs_diff": d, **caches},
        d == 0 and not any(caches.values()),
    )
    info = {
        "text_input": spec["text"],
        "speaker_wav": "ref.wav",
        "emotion_wav": spec["emotion_wav"] or "ref.wav",
        "emo_alpha_used": alpha,
        "n_segments": n_segments,
    }
    return S, checks, info


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def stage_table(S):
    """Per stage: the keys to feed (role input/both) and to compare (output/both), exact for integers."""
    stages = {}
    for k, m in S.meta.items():
        if m["stage"] == "-":
            continue
        st = stages.setdefault(m["stage"], {"id": m["stage"], "feed": [], "compare": []})
        if m["role"] in ("input", "both"):
            st["feed"].append(k)
        if m["role"] in ("output", "both"):
            exact = m["dtype"].startswith(("int", "<U")) and k != "wav_int16"
            st["compare"].append({"key": k, "how": "exact" if exact else "rel<1e-4"})
    return list(stages.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("outdir")
    ap.add_argument("--orig", default="/tmp/orig2", help="the original source tree (index-tts at ee40fa7)")
    a = ap.parse_args()
    ckpt, outdir = os.path.abspath(a.ckpt), os.path.abspath(a.outdir)
    os.makedirs(outdir, exist_ok=True)
    sys.path.insert(0, a.orig)
    os.chdir(ckpt)  # the original sets HF caches relative to the working directory

    import importlib.metadata
    import platform

    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from indextts import infer_v2

    hf = os.path.join(ckpt, "hf_cache")
    aux = {
        "w2v_bert": os.path.join(hf, "w2v-bert-2.0"),
        "semantic_codec": os.path.join(hf, "semantic_codec_model.safetensors"),
        "campplus": os.path.join(hf, "campplus_cn_common.bin"),
        "bigvgan": os.path.join(hf, "bigvgan"),
    }
    tts = infer_v2.IndexTTS2(
        cfg_path=os.path.join(ckpt, "config.yaml"),
        model_dir=ckpt,
        device="cpu",
        use_qwen_emo=False,
        aux_paths=aux,
    )
    bad = verify_loaded(tts, ckpt)
    if bad:
        sys.exit(f"the original did not load every tensor as stored: {bad[:10]}")
    with open(os.path.join(ckpt, "make_checkpoint.json")) as f:
        made = json.load(f)
    versions = {
        p: importlib.metadata.version(p)
        for p in ("torch", "torchaudio", "transformers", "tokenizers", "librosa", "numpy", "sentencepiece")
    }
    common = {
        "checkpoint": {
            "weight_seed": made["seed"],
            "checkpoint_digest": made["checkpoint_digest"],
            "keys_json_sha256": made["spec_sha256"],
            "note": "make_checkpoint.py OUTDIR --seed weight_seed must report this checkpoint_digest",
        },
        "original": {
            "repository": "index-tts/index-tts",
            "commit": "ee40fa7",
            "versions": {"python": platform.python_version(), **versions},
            "src_files_sha256": {p: sha256(os.path.join(a.orig, p)) for p in SRC_FILES},
            "text_normalizer": "WeTextProcessing replaced by an identity stub (tools/parity25/stubs/tn)",
            "oracle": "tools/parity2/run_original.py",
        },
    }
    seeds = {
        "forced_codes": f"numpy default_rng({FORCED_SEED}).integers(0, 8192, {N_CODES})",
        "cfm_z": f"torch.manual_seed({CFM_SEED}); torch.randn(1, 80, T)",
        "dit_in_x": f"torch.Generator().manual_seed({DIT_SEED}); randn(2, 80, T)",
    }
    base = None
    for name, spec in CASES.items():
        S, checks, info = run_case(tts, ckpt, spec)
        loaded = (
            "every tensor of gpt.pth, s2mel.pth, w2v-bert, codec, campplus, bigvgan, stats, feat1/2 loaded"
        )
        checks = {"weights_fully_loaded": {"value": loaded, "ok": True}, **checks}
        case = {
            **info,
            "input_seed": 0,
            "n_forced_codes": N_CODES,
            "segment": 0,
            "max_text_tokens_per_segment": MAX_TOKENS,
            "seeds": seeds,
        }
        case["emo_vector_weights"] = EMO_WEIGHTS
        side = {
            "about": "IndexTTS-2 stage-by-stage parity vectors, computed with the original implementation at "
            "commit ee40fa7 (tools/parity2/run_original.py) on the checkpoint that make_checkpoint.py "
            "regenerates. Feed each stage the stored inputs, compare its outputs; see "
            "tools/parity2/README.md.",
            "case": case,
            **common,
            "checks": checks,
            "stages": stage_table(S),
            "keys": S.meta,
        }
        if base is not None:  # a delta set: drop what is bit-identical to the base
            again = [k for k in S.arrays if k.startswith(NOT_REPEATED)]
            same = sorted(
                k for k in S.arrays if k not in again and np.array_equal(S.arrays[k], base.arrays[k])
            )
            for k in same + again:
                S.arrays.pop(k, None)
                S.meta.pop(k, None)
            side.update(base="vectors_s0.npz", same_as_base=sorted(same), keys=S.meta, stages=stage_table(S))
        npz = os.path.join(outdir, f"{name}.npz")
        np.savez_compressed(npz, **S.arrays)
        with open(os.path.join(outdir, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(side, f, indent=1, ensure_ascii=False)
        failed = [k for k, c in checks.items() if not c["ok"]]
        print(
            f"[run_original] {name}: {len(S.arrays)} arrays, {os.path.getsize(npz) / 1e6:.2f} MB; "
            f"checks failed: {failed or 'none'}"
        )
        print(json.dumps(checks, indent=1, default=str)[:3000])
        if base is None:
            base = S


if __name__ == "__main__":
    main()
