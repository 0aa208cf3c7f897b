#!/usr/bin/env python3
"""Regenerate an IndexTTS parity checkpoint (IndexTTS-2 or 2.5): small random weights in the official layout.

    python make_checkpoint.py OUTDIR [--seed 0] [--spec DIR] [--force] [--no-verify] [--record]

Needs numpy, torch (only for torch.save), safetensors and PyYAML; imports nothing of IndexTTS or fasttts, and
nothing beside itself, so a copy of it with its spec runs anywhere (the GPU acceptance carries one).

The spec folder (default: this script's folder) holds the spec file, the fixed buffers and the files copied
as they are (config.yaml, bpe.model / the .tiktoken ranks, the voices). Which generation it is comes from
the spec file found there:
    keys.json   + buffers.npz     IndexTTS-2   (tools/parity2; manifest make_checkpoint.json)
    keys25.json + buffers25.npz   IndexTTS-2.5 (tools/parity25, build_spec25.py; make_checkpoint25.json)
The spec lists every tensor of every file (nested path, shape, dtype, init rule and parameters, digest) and
the small JSON/text files of the layout; this script only turns it into files:
    IndexTTS-2:   config.yaml bpe.model gpt.pth s2mel.pth wav2vec2bert_stats.pt feat1.pt feat2.pt
                  hf_cache/{semantic_codec_model.safetensors, campplus_cn_common.bin}
                  hf_cache/w2v-bert-2.0/{config.json, preprocessor_config.json, model.safetensors}
                  hf_cache/bigvgan/{config.json, bigvgan_generator.pt}  ref.wav emo.wav
    IndexTTS-2.5: the same without bpe.model and the MaskGCT codec, plus codec.pth and the .tiktoken ranks

Values (README "How the weights are made"): each tensor has its own PCG64 stream seeded with
sha256("{seed}:{file}:{name}"), name = nested path joined with "/"; unit noise z is the Irwin-Hall(4) sum of
the four 16-bit fields of each raw 64-bit output, scaled to unit variance, so every platform and numpy
version gives the same bits. Every constant-initialised tensor of the original (norm scales and shifts,
biases, ConvNeXt gamma, running statistics, weight-norm gains) is perturbed by its rule. The 2.5 files whose
names and shapes equal the v2 ones (w2v-BERT, CAM++, BigVGAN, stats, feat1, the s2mel modules) therefore
come out bit-identical to them.

For the spec's digest seed every tensor is checked against its digest; any difference is an error (the
stored vectors apply to exactly these tensors). --record (used once by the maintainer after a spec change)
writes the per-tensor digests and the checkpoint digest of that seed into the spec file instead.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# spec format -> (spec file, buffers file, manifest written into OUTDIR)
FORMATS = {
    "indextts2-parity-keys/1": ("keys.json", "buffers.npz", "make_checkpoint.json"),
    "indextts25-parity-keys/1": ("keys25.json", "buffers25.npz", "make_checkpoint25.json"),
}
UNIT = math.sqrt(3.0 / (65536.0 * 65536.0 - 1.0))
CENTRE = 2 * 65535
MASK16 = np.uint64(0xFFFF)


def unit_noise(seed: int, file: str, name: str, n: int) -> np.ndarray:
    """n values of unit noise for one tensor (float64), from its own PCG64 stream."""
    s0 = int(hashlib.sha256(f"{seed}:{file}:{name}".encode()).hexdigest(), 16)
    raw = np.asarray(np.random.PCG64(s0).random_raw(n) if n else np.zeros(0, np.uint64), dtype=np.uint64)
    acc = raw & MASK16
    for shift in (16, 32):
        acc += (raw >> np.uint64(shift)) & MASK16
    acc += raw >> np.uint64(48)
    return (acc.astype(np.int64) - CENTRE).astype(np.float64) * UNIT


def make_value(entry: dict, seed: int, file: str, name: str, buffers: dict) -> np.ndarray:
    shape = tuple(entry["shape"])
    rule = entry["init"]
    if rule == "buffer":
        v = buffers[f"{file}:{name}"]
        if v.shape != shape or str(v.dtype) != entry["dtype"]:
            raise ValueError(
                f"buffers {file}:{name} is {v.shape} {v.dtype}, spec says {shape} {entry['dtype']}"
            )
        return np.array(v, order="C", copy=True)
    if entry["dtype"] != "float32":
        raise ValueError(f"{file}:{name}: rule {rule} makes float32 only")
    z = unit_noise(seed, file, name, int(np.prod(shape, dtype=np.int64)))
    scale = {
        "dense": lambda: z * (entry.get("gain", 1.0) / math.sqrt(entry["fan_in"])),
        "embedding": lambda: z * entry["std"],
        "bias": lambda: 0.1 * z,
        "running_mean": lambda: 0.1 * z,
        "snake_log": lambda: 0.1 * z,
        "norm_scale": lambda: 1.0 + 0.1 * z,
        "running_var": lambda: 0.5 + 0.5 * np.abs(z),
        "wn_v": lambda: z,
        "wn_g": lambda: (entry["gain"] * math.sqrt(entry["m"] / entry["fan_in"])) * (1.0 + 0.1 * z),
    }
    if rule not in scale:
        raise ValueError(f"{file}:{name}: unknown init rule {rule!r}")
    return scale[rule]().astype(np.float32).reshape(shape)


def digest(arr: np.ndarray) -> str:
    return hashlib.sha256(arr.astype(arr.dtype.newbyteorder("<"), order="C").tobytes()).hexdigest()[:16]


def insert(tree, path, value):
    if not path:
        return value
    node = tree
    for k in path[:-1]:
        node = node.setdefault(k, {})
    if path[-1] in node:
        raise ValueError(f"duplicate key {path}")
    node[path[-1]] = value
    return tree


def save(path: str, container: str, tree) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    if container == "torch":
        import torch

        def conv(t):
            return (
                {k: conv(v) for k, v in t.items()}
                if isinstance(t, dict)
                else torch.from_numpy(np.array(t, copy=True))
            )

        torch.save(conv(tree), tmp)
    elif container == "safetensors":
        from safetensors.numpy import save_file

        # transformers' from_pretrained wants the metadata {"format": "pt"}
        save_file({k: np.array(v, order="C") for k, v in tree.items()}, tmp, metadata={"format": "pt"})
    else:
        raise ValueError(f"unknown container {container}")
    os.replace(tmp, path)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def spec_names(spec_dir: str, generation: str | None) -> tuple[str, ...]:
    """(format, spec file, buffers file, manifest) of the given generation, else of the spec file present."""
    for fmt, names in FORMATS.items():
        if fmt == generation or (generation is None and os.path.isfile(os.path.join(spec_dir, names[0]))):
            return (fmt, *names)
    sys.exit(f"{spec_dir}: no spec file ({' or '.join(n[0] for n in FORMATS.values())})")


def main(generation: str | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spec", default=HERE, help="folder with the spec file, its buffers, config.yaml, wavs")
    ap.add_argument(
        "--force", action="store_true", help="rewrite even if OUTDIR already holds this checkpoint"
    )
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--record", action="store_true", help="store the seed's digests in the spec file")
    a = ap.parse_args()

    fmt, spec_file, buffers_file, manifest_name = spec_names(a.spec, generation)
    tag = f"[{os.path.splitext(manifest_name)[0]}]"
    keys_path = os.path.join(a.spec, spec_file)
    with open(keys_path, encoding="utf-8") as f:
        keys = json.load(f)
    if keys.get("format") != fmt:
        sys.exit(f"{keys_path}: format {keys.get('format')!r}, expected {fmt!r}")
    if a.record and a.seed != keys["digest_seed"]:
        sys.exit("--record only for the digest seed")
    verify = not a.no_verify and not a.record and a.seed == keys["digest_seed"]
    spec_digest = sha256_file(keys_path)
    gen_digest = sha256_file(os.path.abspath(__file__))

    manifest = os.path.join(a.outdir, manifest_name)
    expected = list(keys["files"]) + list(keys["text_files"]) + list(keys["copy_files"].values())
    if os.path.isfile(manifest) and not a.force and not a.record:
        with open(manifest) as f:
            old = json.load(f)
        if (
            old.get("seed") == a.seed
            and old.get("spec_sha256") == spec_digest
            and old.get("generator_sha256") == gen_digest
            and old.get("complete")
            and all(os.path.isfile(os.path.join(a.outdir, r)) for r in expected)
        ):
            print(f"{tag} {a.outdir} already holds seed {a.seed} of this spec; nothing to do")
            return
    os.makedirs(a.outdir, exist_ok=True)
    if os.path.exists(manifest):
        os.remove(manifest)

    with np.load(os.path.join(a.spec, buffers_file)) as z:
        buffers = {k: z[k] for k in z.files}
    lines, bad, n_tensors, n_values = [], [], 0, 0
    for file, spec in keys["files"].items():
        tree = {}
        for entry in spec["tensors"]:
            name = "/".join(entry["path"])
            value = make_value(entry, a.seed, file, name, buffers)
            d = digest(value)
            if a.record:
                entry["sha256"] = d
            elif verify and d != entry.get("sha256"):
                bad.append(f"{file}:{name}")
            lines.append(f"{file}:{name}:{d}\n")
            tree = insert(tree, entry["path"], value)
            n_tensors += 1
            n_values += value.size
        save(os.path.join(a.outdir, file), spec["container"], tree)
        print(f"{tag} {file}: {len(spec['tensors'])} tensors", flush=True)
        del tree
    for rel, text in keys["text_files"].items():
        path = os.path.join(a.outdir, rel)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    for src, rel in keys["copy_files"].items():
        os.makedirs(os.path.dirname(os.path.join(a.outdir, rel)) or ".", exist_ok=True)
        shutil.copyfile(os.path.join(a.spec, src), os.path.join(a.outdir, rel))

    ckpt_digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    if a.record:
        keys["checkpoint_digest"] = ckpt_digest
        with open(keys_path, "w", encoding="utf-8") as f:
            json.dump(keys, f, indent=1, ensure_ascii=False)
        spec_digest = sha256_file(keys_path)
        print(f"{tag} recorded digests of seed {a.seed} in {keys_path}")
    elif verify:
        if bad or ckpt_digest != keys["checkpoint_digest"]:
            sys.exit(
                f"{tag} {len(bad)} tensors differ from the reference generation "
                f"(first: {bad[:5]}); the stored vectors do NOT apply to this checkpoint"
            )
        print(f"{tag} all {n_tensors} tensors match {spec_file} digests")
    with open(manifest, "w") as f:
        json.dump(
            {
                "seed": a.seed,
                "spec_sha256": spec_digest,
                "generator_sha256": gen_digest,
                "checkpoint_digest": ckpt_digest,
                "tensors": n_tensors,
                "values": int(n_values),
                "verified": verify or a.record,
                "complete": True,
            },
            f,
            indent=1,
        )
    print(
        f"{tag} wrote {a.outdir}: {n_tensors} tensors, {n_values / 1e6:.1f} M values, "
        f"checkpoint digest {ckpt_digest[:16]}"
    )


if __name__ == "__main__":
    main()
