#!/usr/bin/env python3
"""Build keys25.json and buffers25.npz: the spec of the IndexTTS-2.5 parity checkpoint.

    /tmp/ref25/bin/python build_spec25.py --orig /tmp/orig [--out DIR]

Runs in the reference environment (README.md), because the key names and shapes must be exactly what the
ORIGINAL modules create: it instantiates them from config.yaml (beside this script) and reads their state
dicts. Each tensor gets an init rule (the rules of tools/parity2/make_checkpoint.py); fixed buffers
are stored verbatim in buffers25.npz. The tokenizer rank file is built here too (delta spec section 13.2
option (a)) and stored in keys25.json as a text file, as are the small JSON configs of the layout.

Files whose architecture is the same as in the v2 parity checkpoint (w2v-BERT, CAM++, BigVGAN, the stats,
the s2mel modules) are cross-checked against tools/parity2/keys.json: same keys, shapes and rules,
so with the same seed those tensors come out bit-identical to the v2 checkpoint's.

make_checkpoint25.py then needs only numpy, torch (for torch.save), safetensors and PyYAML.
"""

import argparse
import base64
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = "indextts25-parity-keys/1"
V2_PARITY = os.path.join(HERE, "..", "parity2")  # the v2 spec (keys.json)

# Words and characters the test texts use; each becomes one token (with and without a leading space), so the
# BPE segmentation is short and realistic. Everything else falls back to single bytes.
VOCAB_WORDS = [
    "hello",
    "world",
    "this",
    "is",
    "a",
    "test",
    "small",
    "quick",
    "brown",
    "fox",
    "minute",
    "ready",
    "it",
    "the",
    "and",
    "of",
    "to",
    "in",
    "we",
    "are",
    "speech",
    "model",
    "voice",
    "today",
    "weather",
    "very",
    "good",
    "nice",
    "yes",
    "no",
    "one",
    "two",
    "three",
]
VOCAB_UPPER = [
    "HOLA",
    "MUNDO",
    "ESTO",
    "ES",
    "UNA",
    "PRUEBA",
    "BUENOS",
    "DIAS",
    "GRACIAS",
    "SE",
    "LA",
    "EL",
    "DE",
]
VOCAB_CJK = (
    "你好世界今天气很行不走我们是一个测试中文语音合成模型上手日本こんにちはじょうずですねテストありがとう"
)
VOCAB_AR = ["مرحبا", "بالعالم", "هذا", "اختبار"]
VOCAB_PIECES = ["xing", "m", " ih", "1", " n", " ah", "0", " t", ".", ",", "?", "'", "  "]


def gpt2_byte_order():
    """The 256 single bytes in GPT-2 / Whisper rank order: rank 0 = '!', rank 1 = '"', rank 220 = ' '."""
    bs = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    )
    rest = [b for b in range(256) if b not in bs]
    return bs + rest


def build_rank_file():
    """The tiny multilingual_zh_ja_yue_char_del.tiktoken: 256 bytes + prefix chains of the test words.

    A multi-byte token is reachable by BPE only if it is the merge of two lower-ranked tokens; adding every
    prefix of a word (in length order) guarantees that. Returns (text, number of ranks)."""
    tokens = [bytes([b]) for b in gpt2_byte_order()]
    seen = set(tokens)
    targets = []
    for w in VOCAB_WORDS + VOCAB_UPPER + VOCAB_AR:
        targets += [w, " " + w]
    for ch in VOCAB_CJK:
        targets += [ch, " " + ch]
    targets += VOCAB_PIECES
    for t in targets:
        b = t.encode("utf-8")
        for n in range(2, len(b) + 1):
            if b[:n] not in seen:
                seen.add(b[:n])
                tokens.append(b[:n])
    lines = [f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(tokens)]
    return "".join(lines), len(tokens)


def fan_in_of(mod, w):
    import torch.nn as nn

    name = type(mod).__name__
    if isinstance(mod, nn.Linear):
        return mod.in_features
    if isinstance(mod, nn.ConvTranspose1d):
        return mod.in_channels * mod.kernel_size[0] // mod.stride[0]
    if isinstance(mod, (nn.Conv1d, nn.Conv2d)):
        return int(np.prod(w.shape[1:]))
    if name == "Conv1D":  # HF GPT-2: weight stored (in, out)
        return int(w.shape[0])
    raise ValueError(f"no fan_in rule for {name}")


def bigvgan_gain(key):
    if key.startswith("conv_post."):
        return 0.2
    if key.startswith("resblocks.") and (".convs1." in key or ".convs2." in key):
        return 0.5
    return 1.0


def classify(module, file, gain_of=lambda key: 1.0, persistent_only=True):
    """(key, entry, buffer value or None) for every state-dict tensor of module, with its init rule."""
    import torch.nn as nn

    owners = {}
    for mname, mod in module.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owners[f"{mname}.{pname}" if mname else pname] = (mod, pname, True)
        for bname, _ in mod.named_buffers(recurse=False):
            owners[f"{mname}.{bname}" if mname else bname] = (mod, bname, False)
    out = []
    for key, t in module.state_dict().items():
        mod, local, is_param = owners[key]
        cls = type(mod).__name__
        e = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "module": cls}
        buf = None
        norms = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)
        if not is_param:
            if local == "running_mean":
                e["init"] = "running_mean"
            elif local == "running_var":
                e["init"] = "running_var"
            else:
                e["init"] = "buffer"
                buf = t.detach().cpu().numpy().copy()
        elif local == "bias":
            e["init"] = "bias"
        elif local == "weight_v":
            e["init"] = "wn_v"
        elif local == "weight_g":
            v = mod.weight_v
            e.update(init="wn_g", fan_in=fan_in_of(mod, v), m=int(np.prod(v.shape[1:])), gain=gain_of(key))
            if isinstance(mod, nn.ConvTranspose1d):  # normalised over all dims but 0 (= input channels)
                e["m"] = int(np.prod(v.shape[1:]))
        elif local == "weight" and (isinstance(mod, norms) or cls == "RMSNorm"):
            e["init"] = "norm_scale"
        elif local == "weight" and isinstance(mod, nn.Embedding):
            e.update(init="embedding", std=1.0)
        elif local == "weight":
            e.update(init="dense", fan_in=fan_in_of(mod, t), gain=gain_of(key))
        elif local == "gamma":
            e["init"] = "norm_scale"
        elif local in ("alpha", "beta") and cls in ("SnakeBeta", "Snake"):
            e["init"] = "snake_log"
        elif local in ("pos_bias_u", "pos_bias_v"):
            e.update(init="embedding", std=0.5)
        elif local in ("latents", "mask_token", "masked_spec_embed"):
            e.update(init="embedding", std=1.0)
        else:
            raise ValueError(f"{file}:{key} ({cls}.{local}): no init rule")
        out.append((key, e, buf))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orig", default="/tmp/orig", help="extracted original index-tts source")
    ap.add_argument("--out", default=HERE)
    a = ap.parse_args()
    sys.path.insert(0, a.orig)
    import torch
    from indextts.codec.models import EnhancedCodec
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.s2mel.modules.bigvgan import bigvgan
    from indextts.s2mel.modules.bigvgan.env import AttrDict
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from indextts.s2mel.modules.commons import MyModel
    from indextts.utils.tokenizer import LANGUAGE_DICT
    from omegaconf import OmegaConf
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    torch.manual_seed(0)
    cfg_path = os.path.join(HERE, "config.yaml")
    cfg = OmegaConf.load(cfg_path)
    with open(os.path.join(V2_PARITY, "keys.json"), encoding="utf-8") as f:
        v2 = json.load(f)

    rank_text, n_ranks = build_rank_file()
    n_vocab = n_ranks + 1673
    ntt = cfg.gpt.number_text_tokens * cfg.gpt.get("types", 1)
    if ntt + 1 <= n_vocab - 1:
        sys.exit(f"number_text_tokens*types+1 = {ntt + 1} rows cannot hold id {n_vocab - 1}")

    files, buffers = {}, {}

    def add(file, container, structure, entries, prefix=()):
        spec = files.setdefault(file, {"container": container, "structure": structure, "tensors": []})
        for key, e, buf in entries:
            path = list(prefix) + ([key] if key is not None else [])
            spec["tensors"].append({"path": path, **e})
            if buf is not None:
                buffers[f"{file}:{'/'.join(path)}"] = buf

    gpt = UnifiedVoice(**cfg.gpt, spk_cond_mode="campplus")
    add(
        "gpt.pth",
        "torch",
        "flat state dict of UnifiedVoice(**cfg.gpt, spk_cond_mode='campplus')",
        classify(gpt, "gpt.pth"),
    )
    codec = EnhancedCodec(**cfg.semantic_codec, cfg=cfg.semantic_codec)
    add(
        "codec.pth",
        "torch",
        "{'model': state dict of EnhancedCodec} (encoder, down and in_project included, unused at inference)",
        classify(codec, "codec.pth"),
        prefix=("model",),
    )
    s2mel = MyModel(cfg.s2mel)
    for name in ("cfm", "length_regulator"):
        add(
            "s2mel.pth",
            "torch",
            "{'net': {'cfm': sd, 'length_regulator': sd}} (no gpt_layer)",
            classify(s2mel.models[name], "s2mel.pth"),
            prefix=("net", name),
        )
    emo_total = int(sum(cfg.emo_num))
    add(
        "wav2vec2bert_stats.pt",
        "torch",
        "{'mean': (1024,), 'var': (1024,)}",
        [
            ("mean", {"shape": [1024], "dtype": "float32", "init": "running_mean", "module": "stats"}, None),
            ("var", {"shape": [1024], "dtype": "float32", "init": "running_var", "module": "stats"}, None),
        ],
    )
    add(
        "feat1.pt",
        "torch",
        f"bare tensor ({emo_total}, 192): speaker-style prototypes, split by emo_num",
        [
            (
                None,
                {
                    "shape": [emo_total, 192],
                    "dtype": "float32",
                    "init": "embedding",
                    "std": 1.0,
                    "module": "spk_matrix",
                },
                None,
            )
        ],
    )
    add(
        "feat2.pt",
        "torch",
        f"bare tensor ({emo_total}, {cfg.gpt.model_dim}): emotion vectors, split by emo_num",
        [
            (
                None,
                {
                    "shape": [emo_total, cfg.gpt.model_dim],
                    "dtype": "float32",
                    "init": "embedding",
                    "std": 1.0,
                    "module": "emo_matrix",
                },
                None,
            )
        ],
    )
    camp = CAMPPlus(feat_dim=80, embedding_size=192)
    add(
        "hf_cache/campplus_cn_common.bin",
        "torch",
        "flat state dict of CAMPPlus(feat_dim=80, embedding_size=192)",
        classify(camp, "hf_cache/campplus_cn_common.bin"),
    )
    bv_cfg = v2["text_files"]["hf_cache/bigvgan/config.json"]
    voc = bigvgan.BigVGAN(AttrDict(json.loads(bv_cfg)), use_cuda_kernel=False)
    add(
        "hf_cache/bigvgan/bigvgan_generator.pt",
        "torch",
        "{'generator': state dict of BigVGAN (weight-norm form)}",
        classify(voc, "hf_cache/bigvgan/bigvgan_generator.pt", gain_of=bigvgan_gain),
        prefix=("generator",),
    )
    w2v_cfg = v2["text_files"]["hf_cache/w2v-bert-2.0/config.json"]
    w2v = Wav2Vec2BertModel(Wav2Vec2BertConfig(**json.loads(w2v_cfg)))
    add(
        "hf_cache/w2v-bert-2.0/model.safetensors",
        "safetensors",
        "flat state dict of HF Wav2Vec2BertModel",
        classify(w2v, "hf_cache/w2v-bert-2.0/model.safetensors"),
    )

    # Cross-check against the v2 parity spec where the architecture is shared.
    v2_buffers = np.load(os.path.join(V2_PARITY, "buffers.npz"))
    same = {
        "hf_cache/campplus_cn_common.bin": "hf_cache/campplus_cn_common.bin",
        "hf_cache/bigvgan/bigvgan_generator.pt": "hf_cache/bigvgan/bigvgan_generator.pt",
        "hf_cache/w2v-bert-2.0/model.safetensors": "hf_cache/w2v-bert-2.0/model.safetensors",
        "wav2vec2bert_stats.pt": "wav2vec2bert_stats.pt",
        "feat1.pt": "feat1.pt",
    }
    checks = {}
    for f25, f2 in same.items():
        mine = [{k: v for k, v in t.items()} for t in files[f25]["tensors"]]
        theirs = [{k: v for k, v in t.items() if k != "sha256"} for t in v2["files"][f2]["tensors"]]

        def key(t: dict) -> str:
            return "/".join(t["path"])

        if sorted(mine, key=key) != sorted(theirs, key=key):
            pairs = zip(sorted(mine, key=key), sorted(theirs, key=key), strict=False)
            diff = [(key(x), x, y) for x, y in pairs if x != y]
            sys.exit(f"{f25}: spec differs from the v2 parity spec, first: {diff[:2]}")
        checks[f25] = f"identical to the v2 parity spec's {f2} (keys, shapes, rules)"
    v2_s2 = {
        "/".join(t["path"]): {k: v for k, v in t.items() if k != "sha256"}
        for t in v2["files"]["s2mel.pth"]["tensors"]
        if t["path"][1] != "gpt_layer"
    }
    mine_s2 = {"/".join(t["path"]): t for t in files["s2mel.pth"]["tensors"]}
    if v2_s2 != mine_s2:
        sys.exit("s2mel.pth: cfm/length_regulator spec differs from the v2 parity spec")
    checks["s2mel.pth"] = "cfm and length_regulator identical to the v2 parity spec (v2's gpt_layer left out)"
    for k, v in buffers.items():
        if k in v2_buffers.files and not np.array_equal(v2_buffers[k], v):
            sys.exit(f"buffer {k} differs from the v2 parity buffers")

    text_files = {
        "multilingual_zh_ja_yue_char_del.tiktoken": rank_text,
        "hf_cache/bigvgan/config.json": bv_cfg,
        "hf_cache/w2v-bert-2.0/config.json": w2v_cfg,
        "hf_cache/w2v-bert-2.0/preprocessor_config.json": v2["text_files"][
            "hf_cache/w2v-bert-2.0/preprocessor_config.json"
        ],
    }
    keys = {
        "format": FORMAT,
        "about": "Every tensor of every file of the IndexTTS-2.5 parity checkpoint "
        "(the layout infer_v2_5 reads; "
        "config.yaml and the voices are copied files, the .tiktoken rank file and the JSON configs are "
        "text_files). Per tensor: nested path, shape, dtype, init rule and its parameters, the class of "
        "the module that owns it in the original code, sha256 = first 16 hex digits of the SHA-256 of "
        "its little-endian bytes for seed digest_seed. Keys and shapes were read from the original "
        "modules instantiated from config.yaml (build_spec25.py).",
        "variant": "indextts-2.5",
        "noise": v2["noise"],
        "rules": v2["rules"],
        "tokenizer": {
            "ranks": n_ranks,
            "specials": 1673,
            "n_vocab": n_vocab,
            "language_rows": len(LANGUAGE_DICT) + 1,
            "construction": "256 single bytes in GPT-2 order (! = 0, \" = 1, ' ' = 220), then every "
            "prefix of the test words/characters (build_spec25.py VOCAB_*)",
        },
        "cross_checks": checks,
        "digest_seed": 0,
        "checkpoint_digest": None,
        "files": files,
        "text_files": text_files,
        "copy_files": {"config.yaml": "config.yaml", "ref.wav": "ref.wav", "emo.wav": "emo.wav"},
    }
    np.savez_compressed(os.path.join(a.out, "buffers25.npz"), **buffers)
    with open(os.path.join(a.out, "keys25.json"), "w", encoding="utf-8") as f:
        json.dump(keys, f, indent=1, ensure_ascii=False)
    n = sum(len(s["tensors"]) for s in files.values())
    print(
        f"[build_spec25] {n} tensors in {len(files)} files, {len(buffers)} buffers, {n_ranks} ranks "
        f"(n_vocab {n_vocab})"
    )


if __name__ == "__main__":
    main()
