"""`fasttts tiny-checkpoint DIR`: a random, shrunken IndexTTS-2 checkpoint in the official layout.

Every file of spec §1.1 is written in its official format (config.yaml, flat `gpt.pth`, `s2mel.pth` with
`net`, stats and emotion matrices as torch files, a SentencePiece `bpe.model`, the w2v-BERT folder with
config/preprocessor JSON and safetensors, the codec safetensors, the CAMPPlus state dict, BigVGAN's
config.json + {'generator': ...}) from OUR module definitions instantiated with every width shrunk. That
works because our loaders derive every size from config.yaml and the tensors (the original hard-codes
some widths: the GPT stays 1280 wide, w2v-BERT/codec/conditioners 1024, which is why the parity
checkpoint is 0.9 GB and this one is about 5 MB).

config.yaml carries `fasttts_random_weights: true` (checkpoint.RANDOM_KEY), which `fasttts build` copies
into the engine's manifest as `random_weights`, so every engine made from it says that it does not clone.

Weights are random but non-trivial (norm scales near 1 but not 1, biases non-zero, BatchNorm running
statistics set, weight-norm gains consistent with their directions), drawn from a torch Generator seeded
with `seed`, so the same seed gives the same tensors. The tokenizer is trained on the spot from a small
built-in text with SentencePiece's trainer (deterministic, single-threaded).

`write_tiny_checkpoint25` writes the IndexTTS-2.5 layout (nets/release_layout25.py) the same way, with
the tiny tiktoken rank file of nets/tiktoken_ranks.py as its tokenizer.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from fasttts_cli.nets import random_model as rm
from fasttts_cli.nets.checkpoint import RANDOM_KEY
from fasttts_cli.nets.release_layout25 import CODEC_FILE
from fasttts_cli.nets.tiktoken_ranks import TOKENIZER_FILE, tiny_ranks, write_tiktoken
from fasttts_cli.nets.tiny_config import (  # noqa: F401  (the names this module has always offered)
    EMO_NUM,
    FULL,
    FULL25,
    PREPROCESSOR_CONFIG,
    STOP_BIAS,
    TINY,
    TINY25,
    TINY_CONFIG,
    Sizes,
    bigvgan_config,
    make_config,
    make_config25,
    w2v_config,
)

_randomize = rm.init_weights  # the one init rule (bench's full-size random checkpoint calls it by this name)

# Uppercase English (the original upper-cases before SentencePiece) plus a few CJK characters, so both
# routes of the text front end produce known pieces.
_BPE_TEXT = """
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG. HELLO WORLD, THIS IS A SMALL TEST!
IT IS QUITE READY, IS IT NOT? WE WILL MEET AGAIN AT SEVEN O'CLOCK TONIGHT.
SHE SAID THAT THE WEATHER WOULD BE FINE TOMORROW, BUT IT RAINED ALL DAY.
ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE TWENTY THIRTY HUNDRED THOUSAND.
WHERE ARE YOU GOING? I AM GOING HOME. PLEASE CALL ME WHEN YOU ARRIVE.
THE DOCTOR AND THE NURSE WALKED INTO THE ROOM AND LOOKED AT THE WINDOW.
DO NOT WORRY ABOUT IT; EVERYTHING WILL BE ALL RIGHT IN THE END.
MY NAME IS ALICE AND THIS IS BOB. WE LIVE IN A SMALL TOWN NEAR THE RIVER.
WHAT TIME IS IT NOW? IT IS HALF PAST NINE IN THE MORNING.
THANK YOU VERY MUCH FOR YOUR HELP. YOU ARE WELCOME, MY FRIEND.
你 好 世 界 我 们 是 朋 友 今 天 天 气 很 好 谢 谢 再 见 中 国 人 大 小 一 二 三 十 百 千 万 点 分 年 月 日
"""


def train_bpe(vocab_size: int = 200) -> bytes:
    """A small SentencePiece BPE model (ids 0/1/2 = <s>/</s>/<unk>), trained deterministically."""
    import sentencepiece as spm

    lines = [ln.strip() for ln in _BPE_TEXT.strip().splitlines() if ln.strip()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 4),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        bos_id=0,
        eos_id=1,
        unk_id=2,
        pad_id=-1,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ writer


def _save_torch(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)


def _state(module: nn.Module, *, copy: bool = False) -> dict[str, torch.Tensor]:
    # safetensors refuses tensors that share storage: copy for it; torch.save needs no copy (full-size
    # GPT weights are 3.5 GB, a copy would double that)
    return {
        k: (v.detach().clone() if copy else v.detach()).contiguous() for k, v in module.state_dict().items()
    }


def _make_readable(folder: Path) -> None:
    # mkdtemp makes a 0700 folder and safetensors writes 0600 files; a checkpoint is ordinary data.
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


@contextmanager
def _staged_folder(out_dir: Path | str) -> Iterator[Path]:
    """A temporary sibling of `out_dir` (which must be empty or absent), renamed onto it when the body
    succeeds and removed when it fails, so a half-written checkpoint is never left behind."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        from fasttts_cli.errors import UsageError

        raise UsageError(f"{out}: directory is not empty", hint="choose a new folder for the tiny checkpoint")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        _make_readable(tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _small_tensors(g: torch.Generator, sizes: Sizes) -> dict[str, Any]:
    """feat1, feat2 and the w2v statistics, drawn first from `g` (both models, same order)."""
    with torch.no_grad():
        n_proto = sum(EMO_NUM)
        feat1 = 0.5 * torch.randn(n_proto, sizes.style_dim, generator=g)
        feat2 = 0.5 * torch.randn(n_proto, sizes.gpt_dim, generator=g)
        mean = 0.1 * torch.randn(sizes.w2v_width, generator=g)
        var = 0.5 + 0.5 * torch.randn(sizes.w2v_width, generator=g).abs()
    return {"feat1.pt": feat1, "feat2.pt": feat2, "wav2vec2bert_stats.pt": {"mean": mean, "var": var}}


def _write_config(path: Path, cfg: dict[str, Any], model: str) -> None:
    path.write_text(
        f"# {model} config.yaml (official schema) of a RANDOM-WEIGHT checkpoint written by "
        "`fasttts tiny-checkpoint`.\n"
        + yaml.safe_dump({**cfg, RANDOM_KEY: True}, sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )


def _write_s2mel(g: torch.Generator, sizes: Sizes, path: Path) -> None:
    # with gpt_layer in both layouts: 2.5's released s2mel.pth holds one too (a known extra there)
    s2mel = rm.random_s2mel(g, sizes)
    _save_torch({"net": {k: dict(v) for k, v in s2mel.official_state_dict().items()}}, path)


def _write_hf_cache(g: torch.Generator, sizes: Sizes, hf: Path, *, maskgct_codec: bool) -> None:
    """hf_cache/: w2v-BERT, (the MaskGCT codec, v2 only), CAMPPlus, BigVGAN, drawn in that order."""
    from safetensors.torch import save_file

    w2v_dir = hf / "w2v-bert-2.0"
    w2v_dir.mkdir(parents=True)
    w2v = rm.random_w2v(g, sizes)
    w2v_cfg = w2v.config.to_dict()
    w2v_cfg["architectures"] = ["Wav2Vec2BertModel"]
    (w2v_dir / "config.json").write_text(json.dumps(w2v_cfg, indent=2, sort_keys=True), encoding="utf-8")
    (w2v_dir / "preprocessor_config.json").write_text(
        json.dumps(PREPROCESSOR_CONFIG, indent=2), encoding="utf-8"
    )
    save_file(_state(w2v, copy=True), str(w2v_dir / "model.safetensors"), metadata={"format": "pt"})
    del w2v
    codec = rm.random_codec(g, sizes) if maskgct_codec else None
    campplus = rm.random_campplus(g, sizes)
    bigvgan = rm.random_bigvgan(g, sizes)
    if codec is not None:
        save_file(
            _state(codec, copy=True), str(hf / "semantic_codec_model.safetensors"), metadata={"format": "pt"}
        )
    _save_torch(_state(campplus), hf / "campplus_cn_common.bin")
    (hf / "bigvgan").mkdir()
    (hf / "bigvgan" / "config.json").write_text(json.dumps(bigvgan_config(sizes), indent=2), encoding="utf-8")
    _save_torch({"generator": _state(bigvgan)}, hf / "bigvgan" / "bigvgan_generator.pt")


def _write_checkpoint(out_dir: Path | str, seed: int, sizes: Sizes, stop_bias: float, *, v25: bool) -> Path:
    with _staged_folder(out_dir) as tmp:
        g = torch.Generator().manual_seed(seed)
        small = _small_tensors(g, sizes)
        cfg = make_config25(sizes) if v25 else make_config(sizes)
        _write_config(tmp / "config.yaml", cfg, "IndexTTS-2.5" if v25 else "IndexTTS-2")
        # one module at a time, so a full-size checkpoint never holds every module in memory at once
        gpt = (rm.random_gpt25 if v25 else rm.random_gpt)(g, sizes, stop_bias)
        _save_torch(_state(gpt), tmp / "gpt.pth")
        del gpt
        _write_s2mel(g, sizes, tmp / "s2mel.pth")
        if v25:
            _save_torch({"model": _state(rm.random_codec25(g, sizes))}, tmp / CODEC_FILE)
        for name, value in small.items():
            _save_torch(value, tmp / name)
        if v25:
            write_tiktoken(tmp / TOKENIZER_FILE, tiny_ranks())
        else:
            (tmp / "bpe.model").write_bytes(train_bpe())
        _write_hf_cache(g, sizes, tmp / "hf_cache", maskgct_codec=not v25)
    return Path(out_dir)


def write_tiny_checkpoint(
    out_dir: Path | str, seed: int = 0, sizes: Sizes = TINY, *, stop_bias: float = STOP_BIAS
) -> Path:
    """Write every file of the official layout into `out_dir` (created; must be empty or absent).
    `sizes=FULL` writes a full-size random checkpoint (the release's shapes) instead."""
    return _write_checkpoint(out_dir, seed, sizes, stop_bias, v25=False)


def write_tiny_checkpoint25(
    out_dir: Path | str, seed: int = 0, sizes: Sizes = TINY25, *, stop_bias: float = STOP_BIAS
) -> Path:
    """The same for IndexTTS-2.5 (release_layout25): config.yaml without bpe_model, a campplus-mode
    gpt.pth, s2mel.pth (with the extra gpt_layer the release holds), codec.pth = {"model": every
    EnhancedCodec key, the unused encoder side included}, the tiny tiktoken rank file, no bpe.model and
    no MaskGCT codec. `sizes=FULL25` for full size (the §12 sizes chosen in tiny_config)."""
    return _write_checkpoint(out_dir, seed, sizes, stop_bias, v25=True)


WRITERS = {"indextts2": write_tiny_checkpoint, "indextts2.5": write_tiny_checkpoint25}
FULL_SIZES = {"indextts2": FULL, "indextts2.5": FULL25}


def _source_digest() -> str:
    """Digest of the code that shapes a tiny checkpoint: a cached one is stale when any of it changes."""
    import hashlib

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted([*here.glob("*.py"), *(here.parent / "nets").glob("*.py")]):
        h.update(f"{path.parent.name}/{path.name}".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def ensure_tiny_checkpoint(out_dir: Path | str, seed: int = 0, model: str = "indextts2") -> Path:
    """`write_tiny_checkpoint` (or the 2.5 one, `model`) once per code version: reuse `out_dir` when its
    marker matches, else rewrite it. A file lock makes parallel test workers share one copy."""
    import fcntl

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    marker: dict[str, Any] = {"seed": seed, "source": _source_digest()}
    if model != "indextts2":
        marker["model"] = model
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = out / "tiny_checkpoint.json"
        if stamp.is_file():
            try:
                if json.loads(stamp.read_text(encoding="utf-8")) == marker:
                    return out
            except (OSError, json.JSONDecodeError):
                pass
        if out.exists():
            shutil.rmtree(out)
        WRITERS[model](out, seed)
        stamp.write_text(json.dumps(marker), encoding="utf-8")
    return out
