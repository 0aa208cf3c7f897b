#!/usr/bin/env python3
"""Run the ORIGINAL IndexTTS-2.5 (indextts.infer_v2_5) on CPU fp32, stage by stage, and store the vectors.

    /tmp/ref25/bin/python run_original25.py CKPT OUTDIR [--orig /tmp/orig]

CKPT is made by make_checkpoint25.py. Writes OUTDIR/vectors25_s0.npz and vectors25_s0.json (sidecar: every
key with shape, dtype, stage, role; the case; the checkpoint digest; the self-checks the run did).

Every stage calls the original's own objects (the constructed IndexTTS2 and its modules) in the order
infer_generator calls them (infer_v2_5.py:619-856); forward hooks read the intermediates. The end-to-end
run at the end goes through IndexTTS2.infer itself with the same forcing, and must reproduce the staged
waveform exactly.
"""

import argparse
import contextlib
import json
import os
import re
import sys

import numpy as np

TEXT_CASES = {
    # name: (lang, text). zh pinyin annotation, en CMU annotation + stand-alone "!", ja kana annotation and
    # fugashi spacing, es upper case, ar (no normaliser, case unchanged), one long text that splits.
    "zh": ("zh", "你好世界，今天<行|XING2>不行！"),
    "en": ("en", "Hello world! This is a <minute|M IH1 . N AH0 T> test."),
    "ja": ("ja", "こんにちは、日本語の<上手|じょうず>テストです。"),
    "es": ("es", "Hola mundo, esto es una prueba."),
    "ar": ("ar", "مرحبا بالعالم، هذا اختبار."),
    "long": (
        "en",
        "Hello world, this is a small test. The quick brown fox is ready, it is very good. "
        "We are one two three, yes no, hello world again and again, nice voice today.",
    ),
}
EMO_CASE = {"emotion_wav": "emo.wav", "emo_alpha": 0.6}
MAIN = {
    "lang": "zh",
    "text": "你好世界，我们是一个测试。",
    "n": 20,
    "n_odd": 13,
    "duration_factors": [1.0, 1.37],
    "code_seed": 20250,
    "cfm_seed": 1234,
}


class Store:
    def __init__(self):
        self.arrays, self.meta = {}, {}

    def put(self, key, value, stage, role, meaning=""):
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        a = np.asarray(value)
        if a.dtype.kind == "f":
            a = a.astype(np.float32)
        elif a.dtype.kind in "iub" and not key.endswith("wav_int16") and "wav_int16_" not in key:
            a = a.astype(np.int64)
        if key in self.arrays:
            raise KeyError(key)
        self.arrays[key] = a
        self.meta[key] = {
            "shape": list(a.shape),
            "dtype": str(a.dtype),
            "stage": stage,
            "role": role,
            "meaning": meaning,
        }


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def emotion_stage(S, gpt, spk_cond_emb, emo_cond_emb, alpha):
    """merge_emovec as infer_generator calls it, its conditioner intermediates hooked (stage 3.1)."""
    import torch

    rec = {}

    def hook(name):
        def f(mod, inp, out):
            rec.setdefault(name, []).append((inp, out))

        return f

    hs = [
        gpt.emo_conditioning_encoder.register_forward_hook(hook("emo_conformer")),
        gpt.emo_perceiver_encoder.register_forward_hook(hook("emo_perceiver")),
        gpt.emovec_layer.register_forward_hook(hook("emovec_layer")),
    ]
    emovec = gpt.merge_emovec(
        spk_cond_emb,
        emo_cond_emb,
        torch.tensor([spk_cond_emb.shape[-1]]),
        torch.tensor([emo_cond_emb.shape[-1]]),
        alpha=alpha,
    )
    for h in hs:
        h.remove()
    # merge_emovec runs the conditioner twice: emotion audio first, then the speaker (base) audio
    S.put("emo_conformer_out", rec["emo_conformer"][0][1][0], "3.1", "output")
    S.put("emo_perceiver_out", rec["emo_perceiver"][0][1], "3.1", "output")
    S.put("emo_emovec_layer_out", rec["emovec_layer"][0][1], "3.1", "output")
    S.put("emo_base_conformer_out", rec["emo_conformer"][1][1][0], "3.1", "output")
    S.put("emovec", emovec, "3.1", "both", f"(1, D) merge_emovec(spk_cond_emb, emo_cond_emb, alpha {alpha})")
    return emovec


class Abort(Exception):
    pass


# the sampling settings infer() hands inference_speech by default (the same in v2 and 2.5)
INFER_DEFAULTS = {
    "do_sample": True,
    "top_p": 0.8,
    "top_k": 30,
    "temperature": 0.8,
    "num_return_sequences": 1,
    "length_penalty": 0.0,
    "repetition_penalty": 10.0,
}


class Forced:
    """The original inference_speech + HF generate with teacher-forced codes: the allowed-token function
    admits exactly the forced code at each step, then the stop token. p1 = P + 1 fake input ids."""

    def __init__(self, gpt, forced, p1):
        import torch

        self.gpt, self.forced, self.p1, self.n = gpt, forced, p1, len(forced)
        self.positions = torch.cat([torch.tensor([0]), torch.arange(2, self.n + 2)])

    def allowed(self, batch_id, ids):
        k = ids.shape[-1] - self.p1
        return [int(self.forced[k])] if k < self.n else [self.gpt.stop_mel_token]

    def _speech(self, spk_cond_emb, text_tokens, lang_t, emo_cond_emb, emovec, style, ref, **kw):
        import torch

        return self.gpt.inference_speech(
            spk_cond_emb,
            text_tokens,
            lang_t,
            emo_cond_emb,
            cond_lengths=torch.tensor([spk_cond_emb.shape[-1]]),
            emo_cond_lengths=torch.tensor([emo_cond_emb.shape[-1]]),
            emo_vec=emovec,
            campplus_embedding=style,
            wav=ref,
            **INFER_DEFAULTS,
            **kw,
        )

    def run(self, *inputs):
        """-> codes, speech latent, (1, n+1, V) raw mel_head logits of the generate steps (KV cache)."""
        import torch

        logits_rec = []
        lh = self.gpt.inference_model.lm_head.register_forward_hook(
            lambda m, i, o: logits_rec.append(o[:, -1].clone())
        )
        codes, latent = self._speech(
            *inputs, num_beams=1, max_generate_length=self.n + 1, prefix_allowed_tokens_fn=self.allowed
        )
        lh.remove()
        return codes, latent, torch.stack(logits_rec[: self.n + 1], 1)

    def processors(self, num_beams, *inputs):
        """The logits-processor list HF generate builds for infer()'s defaults at num_beams, with the first
        call's (input_ids, scores): generation is stopped there."""
        from transformers.generation import logits_process as LP

        seen = {}
        orig = LP.LogitsProcessorList.__call__

        def spy(self_list, input_ids, scores, **kw):
            seen.update(procs=list(self_list), input_ids=input_ids.clone(), scores=scores.clone())
            raise Abort

        LP.LogitsProcessorList.__call__ = spy
        try:
            self._speech(*inputs, num_beams=num_beams, max_generate_length=self.n + 1)
        except Abort:
            pass
        finally:
            LP.LogitsProcessorList.__call__ = orig
        return seen

    def nocache(self, prefix_emb, attn):
        """The same steps without a cache, mel positions 0 (start) and k+2 (code k): (hidden after ln_f,
        logits, mel input embeddings, mask)."""
        import torch

        gpt, n = self.gpt, self.n
        mel_in = torch.cat([torch.tensor([gpt.start_mel_token]), torch.tensor(self.forced)])
        mel_emb = gpt.mel_embedding(mel_in) + gpt.mel_pos_embedding.emb(self.positions)
        full = torch.cat([prefix_emb, mel_emb.unsqueeze(0)], 1)
        full_mask = torch.cat([attn[:, :-1], torch.ones(1, n + 1, dtype=attn.dtype)], 1)
        h = gpt.gpt(inputs_embeds=full, attention_mask=full_mask, return_dict=True).last_hidden_state
        logits = gpt.mel_head(gpt.final_norm(h[:, prefix_emb.shape[1] :]))
        return h, logits, mel_emb, full_mask


PROC_MODES = ((3, "beam"), (1, "sample"))  # infer()'s default num_beams 3, and plain sampling


def _within(stage, top):
    """stage "4.1" is within "4" and "4.1", not within "41"."""
    return stage == top or stage.startswith(top + ".")


def _plain(d):
    """A processor's settings as JSON values (-inf written as the string "-inf")."""
    return {
        k: v if not isinstance(v, float) or np.isfinite(v) else str(v)
        for k, v in d.items()
        if isinstance(v, (int, float, str))
    }


def processor_stage(S, checks, gen, inputs, gen_logits, fake_ids, tag):
    """Stage 3.6: the processors HF generate builds for infer()'s defaults, applied to the STORED logits;
    row k's history is the fake input ids then forced[:k]. Beam modes process log_softmax(logits)."""
    import torch
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    out = {}
    for beams, mode in PROC_MODES:
        seen = gen.processors(beams, *inputs)
        procs = seen["procs"]
        row0 = torch.log_softmax(gen_logits[0, :1], -1) if beams > 1 else gen_logits[0, :1]
        out[mode] = {
            "processors": [f"{type(p).__name__}({_plain(vars(p))})" for p in procs],
            "num_beams": beams,
            "params": {type(p).__name__: _plain(vars(p)) for p in procs},
            "first_call_history_is_fake_ids": bool(torch.equal(seen["input_ids"][0], fake_ids[0].long())),
            "first_call_scores_rel": rel(seen["scores"][0], row0[0]),
        }
        rows, gap, cum = [], np.inf, np.inf
        for k in range(gen_logits.shape[1]):
            hist = torch.cat([fake_ids[0].long(), torch.tensor(gen.forced[:k])]).unsqueeze(0)
            sc = gen_logits[0, k : k + 1]
            sc = torch.log_softmax(sc, -1) if beams > 1 else sc
            for p in procs:
                if isinstance(p, TopKLogitsWarper):  # near-tie margin at the k-th value
                    top = torch.topk(sc[0], p.top_k + 1).values
                    gap = min(gap, float(top[p.top_k - 1] - top[p.top_k]))
                if isinstance(p, TopPLogitsWarper):  # distance of the kept mass from the cut
                    c = torch.softmax(torch.sort(sc[0]).values, -1).cumsum(-1)
                    cum = min(cum, float((c - (1 - p.top_p)).abs().min()))
                sc = p(hist, sc)
            rows.append(sc[0])
        S.put(
            f"gpt_proc_{mode}_scores",
            torch.stack(rows),
            "3.6",
            "output",
            f"(n+1, V) num_beams={beams}: processors(fake ids + forced[:k], "
            f"{'log_softmax(gen_logits)' if beams > 1 else 'gen_logits'}); -inf = removed",
        )
        checks[f"gpt_proc_{mode}_topk_min_gap"] = gap
        checks[f"gpt_proc_{mode}_topp_min_cum_distance"] = cum
    checks[f"logits_processors{tag}"] = out


EMO_WEIGHTS = [0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.15, 0.2]  # the v2 vectors' case


def emotion_vector_stage(S, checks, tts, I, style, emovec):
    """Stage 3.3, infer(emo_vector=w) (infer_v2_5.py:669-680, 767-768): per category the feat1 row most
    cosine-similar to the style picks the feat2 row; emovec' = sum w_i feat2_i + (1 - sum w) emovec."""
    import torch
    import torch.nn.functional as F

    w = torch.tensor(EMO_WEIGHTS)
    proto = [int(I.find_most_similar_cosine(style, m)) for m in tts.spk_matrix]
    rows = torch.cat([m[i].unsqueeze(0) for i, m in zip(proto, tts.emo_matrix, strict=True)])
    mat = torch.sum(w.unsqueeze(1) * rows, 0)
    mat = mat.unsqueeze(0)
    margin = np.inf
    for m in tts.spk_matrix:
        if m.shape[0] > 1:
            top = torch.topk(F.cosine_similarity(style.float(), m.float(), dim=1), 2).values
            margin = min(margin, float(top[0] - top[1]))
    S.put(
        "emo_vec_weights",
        w,
        "3.3",
        "input",
        "(8,) [happy, angry, sad, afraid, disgusted, melancholic, surprised, calm]",
    )
    S.put("emo_vec_proto_index", np.array(proto), "3.3", "output", "per category argmax cosine(style, feat1)")
    S.put("emo_vec_mat", mat, "3.3", "output", "(1, D) sum_i w_i feat2_chunk_i[proto_i]")
    emo_v = mat + (1 - torch.sum(w)) * emovec
    S.put("emo_vec_emovec", emo_v, "3.3", "output", "(1, D) emovec infer(emo_vector=w) hands the GPT")
    checks["emo_vec_proto_min_margin"] = margin
    return emo_v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("outdir")
    ap.add_argument("--orig", default="/tmp/orig")
    a = ap.parse_args()
    ckpt, outdir = os.path.abspath(a.ckpt), os.path.abspath(a.outdir)
    os.makedirs(outdir, exist_ok=True)
    sys.path.insert(0, a.orig)
    os.chdir(ckpt)  # infer_v2_5 sets HF_HUB_CACHE=./checkpoints/hf_cache at import; keep it inside CKPT

    import librosa
    import tiktoken
    import torch
    import torch.nn.functional as F
    import torchaudio
    import transformers

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from indextts import infer_v2_5 as I
    from indextts.utils.tokenizer import lang_to_token

    S = Store()
    checks = {}
    tts = I.IndexTTS2(cfg_path=os.path.join(ckpt, "config.yaml"), model_dir=ckpt, device="cpu")
    checks["device"] = tts.device
    checks["use_bf16"] = bool(tts.use_bf16)
    checks["low_vram"] = bool(tts.low_vram)
    gpt = tts.gpt

    # ---- verify_loaded: every tensor of every file against the loaded modules ----
    with open(os.path.join(ckpt, "make_checkpoint25.json")) as f:
        ck_manifest = json.load(f)
    loaded = {}

    def cmp_sd(name, module_sd, file_sd, skip=(), alias=lambda k: False):
        bad, n = [], 0
        for k, v in file_sd.items():
            if any(s in k for s in skip):
                continue
            n += 1
            if (
                k not in module_sd
                or module_sd[k].shape != v.shape
                or not torch.equal(module_sd[k].float(), v.float())
            ):
                bad.append(k)
        missing = sorted(k for k in set(module_sd) - set(file_sd) if not alias(k))
        loaded[name] = {"compared": n, "different": bad[:5], "module_keys_missing_in_file": missing[:5]}
        return not bad and not missing

    # post_init_gpt2_config adds aliases of loaded modules (inference_model.*, the tied gpt.wte)
    ok = cmp_sd(
        "gpt.pth",
        gpt.state_dict(),
        torch.load(os.path.join(ckpt, "gpt.pth")),
        alias=lambda k: k.startswith("inference_model.") or k == "gpt.wte.weight",
    )
    ok &= cmp_sd(
        "codec.pth", tts.semantic_codec.state_dict(), torch.load(os.path.join(ckpt, "codec.pth"))["model"]
    )
    s2 = torch.load(os.path.join(ckpt, "s2mel.pth"))["net"]
    for m in ("cfm", "length_regulator"):
        ok &= cmp_sd(f"s2mel.pth:{m}", tts.s2mel.models[m].state_dict(), s2[m])
    ok &= cmp_sd(
        "campplus",
        tts.campplus_model.state_dict(),
        torch.load(os.path.join(ckpt, "hf_cache/campplus_cn_common.bin")),
    )
    from safetensors.torch import load_file

    ok &= cmp_sd(
        "w2v-bert",
        tts.semantic_model.state_dict(),
        load_file(os.path.join(ckpt, "hf_cache/w2v-bert-2.0/model.safetensors")),
    )
    # BigVGAN is stored in weight-norm form and the original folds it at load (remove_weight_norm); compare
    # everything that is not a weight-norm pair, and the folded weights for the pairs.
    bv = torch.load(os.path.join(ckpt, "hf_cache/bigvgan/bigvgan_generator.pt"))["generator"]
    bsd, folded_bad, nf = tts.bigvgan.state_dict(), [], 0
    for k in [k for k in bv if k.endswith("weight_g")]:
        base = k[: -len("_g")]
        g, v = bv[k], bv[base + "_v"]
        dims = list(range(1, v.dim()))
        w = g * v / v.norm(dim=dims, keepdim=True)
        nf += 1
        if rel(bsd[base], w) > 1e-6:
            folded_bad.append(base)
    folded = {k[: -len("_g")] for k in bv if k.endswith("weight_g")}
    ok &= cmp_sd(
        "bigvgan",
        bsd,
        {k: v for k, v in bv.items() if not k.endswith(("weight_g", "weight_v"))},
        alias=lambda k: k in folded,
    )
    loaded["bigvgan"]["weight_norm_folded_compared"] = nf
    loaded["bigvgan"]["weight_norm_folded_different"] = folded_bad
    ok &= not folded_bad
    st = torch.load(os.path.join(ckpt, "wav2vec2bert_stats.pt"))
    ok &= torch.equal(tts.semantic_mean, st["mean"]) and torch.equal(tts.semantic_std, torch.sqrt(st["var"]))
    f1, f2 = torch.load(os.path.join(ckpt, "feat1.pt")), torch.load(os.path.join(ckpt, "feat2.pt"))
    ok &= torch.equal(torch.cat(tts.spk_matrix), f1) and torch.equal(torch.cat(tts.emo_matrix), f2)
    checks["weights_fully_loaded"] = bool(ok)
    checks["weights_loaded_detail"] = loaded
    if not ok:
        sys.exit(f"verify_loaded failed: {json.dumps(loaded)[:2000]}")

    # ---- stage 1: speaker audio, w2v-BERT, prompt mel, CAM++, prompt condition (infer_v2_5.py:619-656) ----
    ref = os.path.join(ckpt, "ref.wav")
    with torch.no_grad():
        audio, sr = tts._load_and_cut_audio(ref, 15)
        S.put("audio_native", audio, "1.1", "output", "librosa.load(ref.wav) at its native rate, (1, N)")
        S.put("audio_native_sr", np.array(sr), "1.1", "output")
        audio_22k = torchaudio.transforms.Resample(sr, 22050)(audio)
        audio_16k = torchaudio.transforms.Resample(sr, 16000)(audio)
        S.put("audio_22k", audio_22k, "1.1", "output")
        S.put("audio_16k", audio_16k, "1.1", "output")
        inputs = tts.extract_features(audio_16k, sampling_rate=16000, return_tensors="pt")
        S.put("w2v_input_features", inputs["input_features"], "1.2", "both")
        S.put("w2v_attention_mask", inputs["attention_mask"], "1.2", "both")
        out = tts.semantic_model(
            input_features=inputs["input_features"],
            attention_mask=inputs["attention_mask"],
            output_hidden_states=True,
        )
        S.put("w2v_hidden17_raw", out.hidden_states[17], "1.3", "output")
        spk_cond_emb = tts.get_emb(inputs["input_features"], inputs["attention_mask"])
        checks["w2v_get_emb_equals_manual"] = bool(
            torch.equal(spk_cond_emb, (out.hidden_states[17] - tts.semantic_mean) / tts.semantic_std)
        )
        S.put("w2v_stat_mean", tts.semantic_mean, "1.3", "info")
        S.put("w2v_stat_std", tts.semantic_std, "1.3", "info")
        S.put(
            "spk_cond_emb", spk_cond_emb, "1.3", "both", "(1, T, 1024) normalised w2v-BERT hidden_states[17]"
        )
        ref_mel = tts.mel_fn(audio_22k.float())
        S.put("refmel", ref_mel, "1.5", "both")
        audio_16k_b = torchaudio.transforms.Resample(sr, 16000)(tts._load_and_cut_audio(ref, 15)[0])
        checks["campplus_reload_identical"] = bool(torch.equal(audio_16k_b, audio_16k))
        fb = torchaudio.compliance.kaldi.fbank(audio_16k_b, num_mel_bins=80, dither=0, sample_frequency=16000)
        S.put("campplus_fbank_raw", fb, "1.6", "output")
        fb = fb - fb.mean(dim=0, keepdim=True)
        S.put("campplus_fbank", fb, "1.6", "both")
        style = tts.campplus_model(fb.unsqueeze(0))
        S.put(
            "campplus_style",
            style,
            "1.6",
            "both",
            "(1, 192) CAM++ style: s2mel style AND the GPT speaker input",
        )
        Tm = ref_mel.size(2)
        prompt_condition = tts.s2mel.models["length_regulator"](
            spk_cond_emb, ylens=torch.LongTensor([Tm]), n_quantizers=3, f0=None
        )[0]
        S.put(
            "prompt_condition",
            prompt_condition,
            "1.7",
            "both",
            "LR(spk_cond_emb, ylens=Tm): continuous w2v features, no codec quantise",
        )
        emo_audio, _ = tts._load_and_cut_audio(ref, 15, sr=16000)
        S.put(
            "audio_emo_16k", emo_audio, "1.8", "output", "emotion path of the main case (emotion = ref.wav)"
        )
        ei = tts.extract_features(emo_audio, sampling_rate=16000, return_tensors="pt")
        S.put("w2v_emo_input_features", ei["input_features"], "1.9", "both")
        S.put("w2v_emo_attention_mask", ei["attention_mask"], "1.9", "both")
        emo_cond_emb = tts.get_emb(ei["input_features"], ei["attention_mask"])
        S.put("emo_cond_emb", emo_cond_emb, "1.10", "both")

    # ---- stage 2: text front end, each step as infer_generator does it (infer_v2_5.py:699-727) ----
    text_cases = {}
    for name, (lang, text) in [*TEXT_CASES.items(), ("main", (MAIN["lang"], MAIN["text"]))]:
        steps = {"raw": text}
        lang_prefix = f"<|{lang.lower()}|> "
        t = tts.text_process.clean_pattern.sub(lambda x: tts.text_process.char_rep_map[x.group()], text)
        steps["char_map"] = t
        if lang.lower() in ["zh", "zhen", "en"]:
            t = tts.text_process.normalize(t)
        elif lang.lower() in ["ja", "es"]:
            t = I.nemo_text_normalize(t, lang.lower())
        steps["normalized"] = t
        if lang.lower() in ["ja", "zh", "zhen", "en"]:
            t = t.lower()
        if lang.lower() == "es":
            t = t.upper()
        steps["cased"] = t
        t = I.apply_pronunciation_annotations(t)
        steps["annotated"] = t
        if lang.lower() == "ja":
            t = tts.ja_text_process.process_ja_text(t)
        steps["fugashi"] = t
        t = re.sub(r"<\|([^|]+)\|>", lambda m: f"<|{m.group(1).upper()}|>", t)
        steps["special_upper"] = t
        segs = tts.split_text_by_tokens(t, 120, lang_prefix)
        seg_ids = []
        for s in segs:
            toks = torch.IntTensor(tts.tokenizer.encode(lang_prefix + s, allowed_special="all")).unsqueeze(0)
            seg_ids.append(F.pad(toks, (0, 1), value=1))
        li = lang_to_token(lang)
        gpt_ids = []
        for ids in seg_ids:  # what prepare_gpt_inputs feeds the text embedding (model_v2.py:674-677)
            keep = ids[0][(ids[0] != gpt.stop_text_token) & (ids[0] != gpt.start_text_token)].long()
            gpt_ids.append(
                torch.cat([torch.tensor([gpt.start_text_token]), keep, torch.tensor([gpt.stop_text_token])])
            )
        p = f"text_{name}_"
        for k, v in steps.items():
            S.put(p + k, np.array(v), "2", "info" if k == "raw" else "output")
        S.put(p + "segments", np.array(segs), "2", "output")
        S.put(p + "segment_lengths", np.array([x.shape[1] for x in seg_ids]), "2", "output")
        S.put(
            p + "segment_ids",
            torch.cat([x[0] for x in seg_ids]).long(),
            "2",
            "output",
            "encode('<|lang|> ' + segment) + [1], segments concatenated",
        )
        S.put(
            p + "gpt_ids",
            torch.cat(gpt_ids),
            "2",
            "output",
            "[start] + strip_{start,stop}(ids) + [stop], concatenated",
        )
        S.put(p + "gpt_lengths", np.array([len(x) for x in gpt_ids]), "2", "output")
        S.put(p + "lang_index", np.array(li), "2", "output")
        text_cases[name] = {"lang": lang, "text": text, "segments": len(segs)}
    checks["text_long_segments"] = text_cases["long"]["segments"]
    main_ids = S.arrays["text_main_segment_ids"]
    if text_cases["main"]["segments"] != 1:
        sys.exit("main text must be one segment")

    # ---- stage 3: GPT conditioning, prefix, forced generation (model_v2.py:725-820) ----
    text_tokens = torch.IntTensor(main_ids).unsqueeze(0)
    lang_t = torch.LongTensor([lang_to_token(MAIN["lang"])])
    n = MAIN["n"]
    rng = np.random.Generator(np.random.PCG64(MAIN["code_seed"]))
    forced = rng.integers(0, 8192, size=n).astype(np.int64)
    with torch.no_grad():
        emovec = emotion_stage(S, gpt, spk_cond_emb, emo_cond_emb, 1.0)
        spk_vec = gpt.spk_emb_proj(style)
        S.put("gpt_spk_vec", spk_vec, "3.2", "output", "spk_emb_proj(campplus_style), (1, D)")
        S.put(
            "gpt_lang_row", gpt.lang_embedding(lang_t[0]), "3.4", "output", "lang_embedding[lang_index], (D,)"
        )
        conds_latent = torch.cat(
            (spk_vec.unsqueeze(0) + emovec.unsqueeze(1), torch.zeros(1, 2, spk_vec.size(-1))), 1
        )
        S.put(
            "gpt_conds_latent", conds_latent, "3.4", "output", "(1, 3, D): spk+emovec, then two zero vectors"
        )
        fake_ids, prefix_emb, attn = gpt.prepare_gpt_inputs(conds_latent, text_tokens, lang_t)
        S.put("gpt_text_ids", torch.tensor(S.arrays["text_main_gpt_ids"]).unsqueeze(0), "3.4", "input")
        gid = torch.tensor(S.arrays["text_main_gpt_ids"])
        text_emb = (
            gpt.text_embedding(gid)
            + gpt.text_pos_embedding.emb(torch.arange(len(gid)))
            + gpt.lang_embedding(lang_t[0])
        ).unsqueeze(0)
        S.put("gpt_text_emb", text_emb, "3.4", "output", "text emb + text pos + lang row, (1, L+2, D)")
        S.put("gpt_prefix_emb", prefix_emb, "3.4", "both", "(1, P = L+5, D)")
        S.put("gpt_gen_input_ids", fake_ids, "3.4", "info", "[1]*P + [start_mel_token]")
        # The segment ids carry a trailing 1 that the strip removes, so prepare_gpt_inputs pads the prefix
        # on the LEFT with zero rows (one per stripped id) and masks them out (model_v2.py:686-692).
        n_pad = prefix_emb.shape[1] - 3 - text_emb.shape[1]
        S.put(
            "gpt_attention_mask",
            attn,
            "3.4",
            "output",
            "prefix mask incl. start_mel slot: 0 for the left pad rows",
        )
        checks["gpt_prefix_left_pad_rows"] = int(n_pad)
        checks["gpt_prefix_pad_rows_zero_and_masked"] = bool(
            torch.all(prefix_emb[:, :n_pad] == 0)
            and torch.all(attn[:, :n_pad] == 0)
            and torch.all(attn[:, n_pad:] == 1)
        )
        checks["gpt_prefix_is_pad_conds_text"] = (
            rel(prefix_emb[:, n_pad:], torch.cat([conds_latent, text_emb], 1)) == 0.0
        )

        gen = Forced(gpt, forced, fake_ids.shape[1])
        base_inputs = (spk_cond_emb, text_tokens, lang_t, emo_cond_emb, emovec, style, ref)
        codes, latent, gen_logits = gen.run(*base_inputs)
        checks["gpt_forced_codes_reproduced"] = bool(
            np.array_equal(codes[0, :n].numpy(), forced) and int(codes[0, n]) == gpt.stop_mel_token
        )
        checks["gpt_spk_latent_equals_spk_vec"] = bool(torch.equal(latent, spk_vec.unsqueeze(0)))
        S.put("gpt_forced_codes", forced, "3.5", "input", "teacher-forced codes, step k feeds c_{k-1}")
        S.put(
            "gpt_gen_logits",
            gen_logits,
            "3.5",
            "output",
            "(1, n+1, 8194) raw mel_head logits of the HF generate steps (KV cache)",
        )

        # Self-check: the same logits without a cache, mel positions 0 (start) and k+2 (code k).
        h, nocache, mel_emb, full_mask = gen.nocache(prefix_emb, attn)
        checks["gpt_nocache_vs_kvcache_maxabs"] = float((nocache - gen_logits).abs().max())
        checks["gpt_nocache_vs_kvcache_rel"] = rel(nocache, gen_logits)
        S.put(
            "gpt_gen_hidden",
            h[:, prefix_emb.shape[1] :],
            "3.5",
            "output",
            "GPT-2 output (after ln_f) at the mel inputs [start, c_0..c_{n-1}], no cache",
        )
        S.put("gpt_mel_positions", gen.positions, "3.5", "info", "mel position ids used: 0, then k+2")
        # Mutation checks: the two zero slots and the language row must move the logits.
        alt = conds_latent.clone()
        # (a constant vector would not do: a constant offset is invisible to every LayerNorm)
        alt[:, 1:] = torch.linspace(-1.0, 1.0, alt.shape[-1])
        _, pe_alt, _ = gpt.prepare_gpt_inputs(alt, text_tokens, lang_t)
        h2 = gpt.gpt(
            inputs_embeds=torch.cat([pe_alt, mel_emb.unsqueeze(0)], 1),
            attention_mask=full_mask,
            return_dict=True,
        ).last_hidden_state
        checks["mutation_constant_slots_invisible_rel"] = 0.0
        alt_c = conds_latent.clone()
        alt_c[:, 1:] = 1.0
        _, pe_c, _ = gpt.prepare_gpt_inputs(alt_c, text_tokens, lang_t)
        hc = gpt.gpt(
            inputs_embeds=torch.cat([pe_c, mel_emb.unsqueeze(0)], 1),
            attention_mask=full_mask,
            return_dict=True,
        ).last_hidden_state
        checks["mutation_constant_slots_invisible_rel"] = rel(
            gpt.mel_head(gpt.final_norm(hc[:, pe_c.shape[1] :])), nocache
        )
        checks["mutation_zero_slots_rel"] = rel(
            gpt.mel_head(gpt.final_norm(h2[:, pe_alt.shape[1] :])), nocache
        )
        _, pe_l, _ = gpt.prepare_gpt_inputs(
            conds_latent, text_tokens, torch.LongTensor([lang_to_token("en")])
        )
        h3 = gpt.gpt(
            inputs_embeds=torch.cat([pe_l, mel_emb.unsqueeze(0)], 1),
            attention_mask=full_mask,
            return_dict=True,
        ).last_hidden_state
        checks["mutation_lang_row_rel"] = rel(gpt.mel_head(gpt.final_norm(h3[:, pe_l.shape[1] :])), nocache)
        processor_stage(S, checks, gen, base_inputs, gen_logits, fake_ids, "")
        emo_v = emotion_vector_stage(S, checks, tts, I, style, emovec)

    # ---- stage 4: codec decode, target length, LR, CFM (infer_v2_5.py:827-849) ----
    codec = tts.semantic_codec
    crec = {}
    hs = [codec.quantizer.register_forward_hook(lambda m, i, o: None)]
    for h in hs:
        h.remove()

    def dec_hook(name):
        def f(mod, inp, out):
            crec[name] = (inp, out)

        return f

    hs = [
        codec.decoder[0].register_forward_hook(dec_hook("dec0")),
        codec.decoder[1].register_forward_hook(dec_hook("dec1")),
        codec.up.register_forward_hook(dec_hook("up")),
    ]
    with torch.no_grad():

        def decode(codes_t):
            crec.clear()
            S_inf = codec.decode(codes_t)
            return S_inf, {k: v for k, v in crec.items()}

        S_infer, cr = decode(torch.tensor(forced).unsqueeze(0))
        S.put("codec_q_emb", cr["dec0"][0][0], "4.1", "output", "out_project(codebook[codes]), (1, 1024, n)")
        S.put("codec_vocos_out", cr["dec0"][1], "4.1", "output", "VocosBackbone output, (1, n, vocos_dim)")
        S.put("codec_dec_out", cr["dec1"][1], "4.1", "output", "Linear vocos_dim->1024, (1, n, 1024)")
        S.put("codec_up_in", cr["up"][0][0], "4.1", "output", "nearest x2, (1, 1024, 2n)")
        S.put("s2mel_S_infer", S_infer, "4.1", "both", "(1, 2n, 1024)")
        checks["codec_q_emb_is_raw_codebook"] = (
            rel(
                cr["dec0"][0][0],
                codec.quantizer.quantizers[0].out_project(
                    codec.quantizer.quantizers[0].codebook.weight[torch.tensor(forced)].T.unsqueeze(0)
                ),
            )
            < 1e-6
        )
        lr = tts.s2mel.models["length_regulator"]
        for df in MAIN["duration_factors"]:
            tl = int(S_infer.shape[1] * 1.72 * df)
            cond = lr(S_infer, ylens=torch.LongTensor([tl]), n_quantizers=3, f0=None)[0]
            tag = f"df{str(df).replace('.', 'p')}"
            S.put(f"s2mel_target_len_{tag}", np.array(tl), "4.2", "output", f"int(2n*1.72*{df})")
            S.put(f"s2mel_cond_{tag}", cond, "4.2", "output")
        forced_odd = forced[: MAIN["n_odd"]]
        S_odd, _cr_odd = decode(torch.tensor(forced_odd).unsqueeze(0))
        S.put("odd_codes", forced_odd, "4.3", "input", f"first {MAIN['n_odd']} forced codes (odd n)")
        S.put("odd_S_infer", S_odd, "4.3", "output")
        for df in MAIN["duration_factors"]:
            tl = int(S_odd.shape[1] * 1.72 * df)
            tag = f"df{str(df).replace('.', 'p')}"
            S.put(f"odd_target_len_{tag}", np.array(tl), "4.3", "output")
            S.put(
                f"odd_cond_{tag}",
                lr(S_odd, ylens=torch.LongTensor([tl]), n_quantizers=3, f0=None)[0],
                "4.3",
                "output",
            )
        for h in hs:
            h.remove()

        # CFM at duration_factor 1.0, seeded noise captured at the solver's entry
        tl = int(S_infer.shape[1] * 1.72 * 1.0)
        cond = lr(S_infer, ylens=torch.LongTensor([tl]), n_quantizers=3, f0=None)[0]
        cat_condition = torch.cat([prompt_condition, cond], dim=1)
        S.put("s2mel_cat_condition", cat_condition, "4.4", "both")
        cfm = tts.s2mel.models["cfm"]
        z_rec, dit_rec = {}, []
        orig_solve = cfm.solve_euler

        def solve(x, *args, **kw):
            z_rec["z"] = x.clone()
            return orig_solve(x, *args, **kw)

        cfm.solve_euler = solve
        dh = cfm.estimator.register_forward_hook(
            lambda m, i, o: dit_rec.append(
                ([t.clone() if isinstance(t, torch.Tensor) else t for t in i], o.clone())
            )
        )
        torch.manual_seed(MAIN["cfm_seed"])
        vc_full = cfm.inference(
            cat_condition,
            torch.LongTensor([cat_condition.size(1)]),
            ref_mel,
            style,
            None,
            25,
            inference_cfg_rate=0.7,
        )
        dh.remove()
        cfm.solve_euler = orig_solve
        vc = vc_full[:, :, Tm:]
        S.put(
            "cfm_z", z_rec["z"], "4.4", "input", f"start noise, torch.manual_seed({MAIN['cfm_seed']}) + randn"
        )
        S.put("cfm_out_full", vc_full, "4.4", "output")
        S.put("cfm_mel", vc, "4.4", "both")
        checks["cfm_dit_calls"] = len(dit_rec)
        names = ["x", "prompt_x", "x_lens", "t", "style", "cond"]
        for nm, t in zip(names, dit_rec[0][0], strict=False):
            S.put(f"dit_in_{nm}", t, "4.5", "input", "first DiT call (step 0, batch [cond, uncond])")
        S.put("dit_out", dit_rec[0][1], "4.5", "output")
        for k in (12, 24):
            S.put(f"dit_step{k}_in_x", dit_rec[k][0][0], "4.5", "input")
            S.put(f"dit_step{k}_in_t", dit_rec[k][0][3], "4.5", "input")
            S.put(f"dit_step{k}_out", dit_rec[k][1], "4.5", "output")

        # ---- stage 5: BigVGAN ----
        wav = tts.bigvgan(vc.float()).squeeze().unsqueeze(0)
        S.put("bigvgan_wav", wav, "5", "output")
        wav_i = torch.clamp(32767 * wav, -32767.0, 32767.0).type(torch.int16)
        S.put("wav_int16", wav_i, "5", "output")

    # ---- e2e: IndexTTS2.infer with the same forcing and seed; compare with the stages ----
    seen = {}
    orig_is = gpt.inference_speech

    def is_spy(*args, **kw):
        seen["text_tokens"] = args[1].clone()
        seen["lang"] = args[2].clone()
        return orig_is(*args, **kw)

    gpt.inference_speech = is_spy
    orig_inf = cfm.inference

    def inf_seeded(*args, **kw):
        torch.manual_seed(MAIN["cfm_seed"])
        return orig_inf(*args, **kw)

    cfm.inference = inf_seeded
    e2e = {}
    for df in MAIN["duration_factors"]:
        sr_out, data = tts.infer(
            ref,
            MAIN["text"],
            None,
            MAIN["lang"],
            num_beams=1,
            max_mel_tokens=n + 1,
            prefix_allowed_tokens_fn=gen.allowed,
            duration_factor=df,
        )
        tag = f"df{str(df).replace('.', 'p')}"
        S.put(
            f"e2e_wav_int16_{tag}",
            data[:, 0].astype(np.int16),
            "e2e",
            "output",
            f"IndexTTS2.infer(ref.wav, main text, None, '{MAIN['lang']}', duration_factor={df}), "
            "forced codes",
        )
        e2e[tag] = {"samples": int(data.shape[0]), "sr": int(sr_out)}
    gpt.inference_speech = orig_is
    cfm.inference = orig_inf
    checks["e2e_text_tokens_equal_stage2"] = bool(np.array_equal(seen["text_tokens"][0].numpy(), main_ids))
    checks["e2e_lang_equal_stage2"] = int(seen["lang"][0]) == int(S.arrays["text_main_lang_index"])
    checks["e2e_df1_equals_staged_wav"] = bool(
        np.array_equal(S.arrays["e2e_wav_int16_df1p0"], S.arrays["wav_int16"][0])
    )
    checks["e2e_df1p37_samples"] = e2e["df1p37"]["samples"]
    checks["e2e_df1p37_expected_samples"] = 256 * int(2 * n * 1.72 * 1.37)
    checks["e2e_caches_equal_stages"] = {
        "cache_spk_cond": bool(torch.equal(tts.cache_spk_cond, spk_cond_emb)),
        "cache_s2mel_style": bool(torch.equal(tts.cache_s2mel_style, style)),
        "cache_s2mel_prompt": bool(torch.equal(tts.cache_s2mel_prompt, prompt_condition)),
        "cache_mel": bool(torch.equal(tts.cache_mel, ref_mel)),
        "cache_emo_cond": bool(torch.equal(tts.cache_emo_cond, emo_cond_emb)),
    }

    # ---- emotion-vector mode through infer() itself: the emovec it hands inference_speech ----
    seen_ev = {}

    def speech_abort(*args, **kw):
        seen_ev["emo_vec"] = kw["emo_vec"].clone()
        raise Abort

    gpt.inference_speech = speech_abort
    with contextlib.suppress(Abort):
        tts.infer(ref, MAIN["text"], None, MAIN["lang"], emo_vector=list(EMO_WEIGHTS), num_beams=1)
    gpt.inference_speech = orig_is
    checks["emo_vec_infer_equals_stage"] = bool(torch.equal(seen_ev["emo_vec"], emo_v))

    # ---- a separate emotion audio (emo.wav, emo_alpha 0.6): only what it changes, the rest same_as_base ----
    E = Store()
    echecks = {}
    emo_wav = os.path.join(ckpt, EMO_CASE["emotion_wav"])
    with torch.no_grad():
        ea, _ = tts._load_and_cut_audio(emo_wav, 15, sr=16000)
        E.put("audio_emo_16k", ea, "1.8", "output", "emo.wav at 16 kHz, cut to 15 s")
        ei = tts.extract_features(ea, sampling_rate=16000, return_tensors="pt")
        E.put("w2v_emo_input_features", ei["input_features"], "1.9", "both")
        E.put("w2v_emo_attention_mask", ei["attention_mask"], "1.9", "both")
        e_cond = tts.get_emb(ei["input_features"], ei["attention_mask"])
        E.put("emo_cond_emb", e_cond, "1.10", "both")
        e_vec = emotion_stage(E, gpt, spk_cond_emb, e_cond, EMO_CASE["emo_alpha"])
        e_conds = torch.cat((spk_vec.unsqueeze(0) + e_vec.unsqueeze(1), conds_latent[:, 1:]), 1)  # zeros
        E.put("gpt_conds_latent", e_conds, "3.4", "output")
        e_fake, e_prefix, e_attn = gpt.prepare_gpt_inputs(e_conds, text_tokens, lang_t)
        E.put("gpt_prefix_emb", e_prefix, "3.4", "both")
        e_inputs = (spk_cond_emb, text_tokens, lang_t, e_cond, e_vec, style, ref)
        e_codes, _, e_logits = gen.run(*e_inputs)
        echecks["gpt_forced_codes_reproduced"] = bool(np.array_equal(e_codes[0, :n].numpy(), forced))
        E.put("gpt_gen_logits", e_logits, "3.5", "output", "(1, n+1, V) raw logits, KV cache")
        e_h, e_nocache, _, _ = gen.nocache(e_prefix, e_attn)
        echecks["gpt_nocache_vs_kvcache_rel"] = rel(e_nocache, e_logits)
        E.put("gpt_gen_hidden", e_h[:, e_prefix.shape[1] :], "3.5", "output", "after ln_f, no cache")
        processor_stage(E, echecks, gen, e_inputs, e_logits, e_fake, "")
    seen.clear()
    gpt.inference_speech = is_spy
    cfm.inference = inf_seeded
    _, e_data = tts.infer(
        ref,
        MAIN["text"],
        None,
        MAIN["lang"],
        emo_audio_prompt=emo_wav,
        emo_alpha=EMO_CASE["emo_alpha"],
        num_beams=1,
        max_mel_tokens=n + 1,
        prefix_allowed_tokens_fn=gen.allowed,
    )
    gpt.inference_speech = orig_is
    cfm.inference = orig_inf
    # 2.5's s2mel reads only the codes (no GPT latent), so with the codes forced the emotion cannot reach it
    echecks["e2e_wav_equals_base"] = bool(np.array_equal(e_data[:, 0], S.arrays["e2e_wav_int16_df1p0"]))
    echecks["e2e_emo_cond_equals_stage"] = bool(torch.equal(tts.cache_emo_cond, e_cond))
    same = sorted(k for k in E.arrays if np.array_equal(E.arrays[k], S.arrays[k]))
    for k in same:
        del E.arrays[k], E.meta[k]
    # 4, 5, e2e: independent of the emotion with the codes forced (checked above); 3.3: infer(emo_vector=w)
    # drops the emotion audio and its alpha, so it is the base's case
    not_repeated = ("3.3", "4", "5", "e2e")
    same_as_base = sorted(
        k
        for k, m in S.meta.items()
        if k not in E.arrays and not any(_within(m["stage"], s) for s in not_repeated)
    )

    # ---- write ----
    import importlib.metadata
    import platform

    npz = os.path.join(outdir, "vectors25_s0.npz")
    np.savez_compressed(npz, **S.arrays)
    stages = {}
    for k, m in S.meta.items():
        stages.setdefault(m["stage"], []).append(k)
    sidecar = {
        "format": "indextts25-parity-vectors/1",
        "about": "Stage-by-stage vectors of the ORIGINAL IndexTTS-2.5 (indextts.infer_v2_5, index-tts commit "
        "ee40fa7) run on CPU fp32 on the random parity checkpoint of tools/parity25 (seed 0).",
        "checkpoint_digest": ck_manifest["checkpoint_digest"],
        "checkpoint_seed": ck_manifest["seed"],
        "config": "tools/parity25/config.yaml (copied into the checkpoint)",
        "case": {
            "main": MAIN,
            "text_cases": text_cases,
            "speaker_wav": "ref.wav",
            "emotion_wav": "ref.wav (default)",
            "emo_alpha_used": 1.0,
            "e2e": e2e,
        },
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchaudio": torchaudio.__version__,
            "transformers": transformers.__version__,
            "librosa": librosa.__version__,
            "numpy": np.__version__,
            "tiktoken": tiktoken.__version__,
            "fugashi": importlib.metadata.version("fugashi"),
            "unidic-lite": importlib.metadata.version("unidic-lite"),
            "stubs": "whisper.tokenizer (functional), tn.* WeText (identity); no nemo",
        },
        "stages_present": sorted(stages),
        "stages_absent": [],
        "stages": stages,
        "keys": S.meta,
        "checks": checks,
    }
    with open(os.path.join(outdir, "vectors25_s0.json"), "w", encoding="utf-8") as f:
        json.dump(sidecar, f, indent=1, ensure_ascii=False)
    enpz = os.path.join(outdir, "vectors25_s0_emo.npz")
    np.savez_compressed(enpz, **E.arrays)
    estages = {}
    for k in [*same_as_base, *E.meta]:
        estages.setdefault(E.meta[k]["stage"] if k in E.meta else S.meta[k]["stage"], []).append(k)
    emo_side = {
        "format": sidecar["format"],
        "about": "Second case of the same run on the same checkpoint: a separate emotion audio (emo.wav) at "
        "emo_alpha 0.6. Holds only the arrays that differ from the base; the keys in same_as_base are "
        "bit-identical there. Stages 4, 5 and e2e are not repeated: with the codes forced they do not see "
        "the emotion (checks.e2e_wav_equals_base); nor 3.3, which drops the emotion audio.",
        "base": "vectors25_s0.npz",
        "same_as_base": same_as_base,
        "checkpoint_digest": sidecar["checkpoint_digest"],
        "checkpoint_seed": sidecar["checkpoint_seed"],
        "config": sidecar["config"],
        "case": {
            **sidecar["case"],
            "emotion_wav": EMO_CASE["emotion_wav"],
            "emo_alpha_used": EMO_CASE["emo_alpha"],
        },
        "environment": sidecar["environment"],
        "stages_present": sorted(estages),
        "stages_not_repeated": list(not_repeated),
        "stages": estages,
        "keys": E.meta,
        # the run's checks (one process for both cases), then this case's own
        "checks": {**checks, **echecks},
    }
    with open(os.path.join(outdir, "vectors25_s0_emo.json"), "w", encoding="utf-8") as f:
        json.dump(emo_side, f, indent=1, ensure_ascii=False)
    print(json.dumps(checks, indent=1)[:3000])
    print(json.dumps(echecks, indent=1))
    print(f"[run_original25] emo case: {len(E.arrays)} arrays, {os.path.getsize(enpz) / 1e6:.2f} MB")
    print(f"[run_original25] {len(S.arrays)} arrays, {os.path.getsize(npz) / 1e6:.2f} MB -> {npz}")


if __name__ == "__main__":
    main()
