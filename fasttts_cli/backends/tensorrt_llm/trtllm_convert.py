"""UnifiedVoice (IndexTTS-2's GPT) -> a TensorRT-LLM 1.2 GPT checkpoint (`config.json` + `rank0.safetensors`).

numpy only at module level (it imports only numpy-only modules of `backends/tensorrt_llm/`), so this
file also runs as a script inside the separate Python 3.12 TensorRT-LLM environment: `finalize` and
`build` (below; `backends/tensorrt_llm/architecture.py` holds them) need tensorrt_llm; in CI they run
against the fake library `tools/fakes/trtllm.py`, not yet against the real one.

A stock GPT-2 engine cannot run UnifiedVoice as is; four adaptations make it fit (DESIGN.md §4):

1. **Conditioning through the prompt-tuning table.** The 34 conditioning rows of a line (speaker latents
   + emovec, then speed_emb[1], speed_emb[0]) are the rows of that line's prompt table; `input_ids` hold
   fake ids `vocab_size + j` (j = 0..33) where they go. The engine is built with
   `max_prompt_embedding_table_size >= max_batch * 34` and run with `prompt_vocab_size = 34` and
   `tasks[b] = b`, so row `tasks[b] * 34 + j` is used.
2. **One merged embedding table**: `[mel_embedding (8194 rows) | text_embedding]`; mel code c -> id c,
   text id t -> id `8194 + t`. The head spans the merged vocabulary (so the stock runtime's logits
   buffers fit) but only the mel rows are real: text rows have zero weight and bias MASKED_LOGIT.
3. **Custom position ids into one merged position table** `[mel_pos | text_pos | one zero row]`:
   conditioning rows -> the zero row (the original adds no position to them), text token i (start and
   stop text tokens included) -> `mel_rows + i`; generation: start token at 0, then code k at **k + 2**
   (the original's quirk, position 1 is never used); latent pass: mel positions 0..n+1.
4. **Both LayerNorms before the head.** The original computes `mel_head(final_norm(ln_f(x)))`. A
   LayerNorm is not affine in its input (it divides by the input's own standard deviation), so
   `final_norm` can neither be folded into `ln_f`'s scale/bias nor into the head's weights: it stays a
   real second LayerNorm on the head's input path. The checkpoint keeps `transformer.ln_f` (= gpt.ln_f)
   and adds `transformer.ln_f.final_norm.{weight,bias}` and a biased `lm_head` (mel_head has a bias;
   stock GPT heads do not), under the architecture name `IndexTTS2GPTForCausalLM` (`model_class`): a
   GPTForCausalLM whose ln_f is LayerNorm -> final_norm, whose head is a biased Linear, and which
   marks the post-final_norm hidden states as an extra output (the s2mel latent). The public port
   keeps only one of the two norms; `reference_forward` below is the executable definition of what
   the engine must compute, and the equivalence test checks it against the parity vectors.

**The latent** is a second, teacher-forced context pass over `[conds | text | start, c_0..c_{n-1}, stop]`
with mel positions 0..n+1 (`latent_inputs`); the hidden states seen during generation sit at positions
k+2 and are NOT the latent (reusing them is an approximation; with beams it would also have to follow the
final beam's ancestry).

Weight-only W8A16/W4A16: TensorRT-LLM's kernels want per-channel int8/int4 weights in an interleaved,
GPU-architecture-specific layout that only `torch.ops.trtllm` produces, so numpy writes the float
weights plus `quantization.quant_algo`, and `finalize` (run with the TensorRT-LLM environment's Python)
quantizes and preprocesses them there. `emulate_weight_only` gives the same per-channel rounding on
the CPU, to estimate the error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script path in TensorRT-LLM's environment: find the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent.parent))

from fasttts_cli.backends.tensorrt_llm import gpt2_numpy  # numpy only, like everything imported here
from fasttts_cli.backends.tensorrt_llm.architecture import (  # noqa: F401  (the build side's names)
    WEIGHT_ONLY_SUFFIXES as _WEIGHT_ONLY_SUFFIXES,
)
from fasttts_cli.backends.tensorrt_llm.architecture import build_engine_cli, finalize, model_class
from fasttts_cli.backends.tensorrt_llm.names import ARCHITECTURE, CONFIG_FILE, MASKED_LOGIT, WEIGHTS_FILE
from fasttts_cli.backends.tensorrt_llm.safetensors_io import read_safetensors, write_safetensors

layer_norm = gpt2_numpy.layer_norm
gelu_new = gpt2_numpy.gelu_new
__all__ = [
    "ARCHITECTURE",
    "CONFIG_FILE",
    "MASKED_LOGIT",
    "WEIGHTS_FILE",
    "build_engine_cli",
    "finalize",
    "model_class",
    "read_safetensors",
    "write_safetensors",
]
QUANT_ALGOS = {"fp16": None, "bf16": None, "fp32": None, "w8a16": "W8A16", "w4a16": "W4A16"}
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "w8a16": "float16", "w4a16": "float16"}


# ------------------------------------------------------------------------------------------ layout


@dataclass(frozen=True)
class MergedLayout:
    """Where everything sits in the merged id and position spaces."""

    n_mel: int  # mel codes incl. start/stop (8194): ids [0, n_mel)
    text_vocab: int  # text ids: merged ids [n_mel, n_mel + text_vocab)
    mel_pos_rows: int  # merged positions [0, mel_pos_rows) = mel positions
    text_pos_rows: int  # then the text positions
    n_conds: int  # conditioning rows per line (prompt-table rows)
    start_mel: int = 8192
    stop_mel: int = 8193
    start_text: int = 0
    stop_text: int = 1
    # IndexTTS-2.5: the text rows come through the prompt table too (2.5 adds the line's language row to
    # every text row, which no token lookup can): line b's prefix is prompt rows 0 .. base + L + 1 of its
    # table (base = n_conds - text_pos_rows conditioning rows, then start, ids, stop as the host made them)
    text_in_prompt: int = 0

    @property
    def vocab_size(self) -> int:
        return self.n_mel + self.text_vocab

    @property
    def text_offset(self) -> int:
        return self.n_mel

    @property
    def text_pos_offset(self) -> int:
        return self.mel_pos_rows

    @property
    def zero_position(self) -> int:
        return self.mel_pos_rows + self.text_pos_rows

    @property
    def max_position_embeddings(self) -> int:
        return self.zero_position + 1

    def prefix(self, text_ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(merged ids, position ids) of one line's prefix [conds | start_text, ids, stop_text]; the
        conditioning rows are fake ids vocab_size + j (prompt table). Start/stop text ids in `text_ids`
        are dropped, as the original does."""
        t = np.asarray(text_ids, dtype=np.int64).reshape(-1)
        t = t[(t != self.start_text) & (t != self.stop_text)]
        full = np.concatenate([[self.start_text], t, [self.stop_text]])
        if full.size > self.text_pos_rows:
            raise ValueError(f"{t.size} text tokens exceed the {self.text_pos_rows - 2} text positions")
        if self.text_in_prompt:
            n = self.n_conds - self.text_pos_rows + full.size
            return self.vocab_size + np.arange(n, dtype=np.int64), np.full(n, self.zero_position, np.int64)
        ids = np.concatenate([self.vocab_size + np.arange(self.n_conds), self.text_offset + full])
        pos = np.concatenate(
            [np.full(self.n_conds, self.zero_position), self.text_pos_offset + np.arange(full.size)]
        )
        return ids.astype(np.int64), pos.astype(np.int64)

    def generation_inputs(
        self, text_ids: Sequence[int] | np.ndarray, codes: Sequence[int] | np.ndarray = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """Context + generated tokens as the generation path sees them: prefix, start at position 0,
        then code k at position k + 2. Step k's logits are those at index len(prefix) + k."""
        ids, pos = self.prefix(text_ids)
        c = np.asarray(codes, dtype=np.int64).reshape(-1)
        ids = np.concatenate([ids, [self.start_mel], c])
        pos = np.concatenate([pos, [0], np.arange(c.size) + 2])
        return ids, pos

    def generation_position(self, step: int) -> int:
        """Position id of the token fed at decode step `step` >= 1 (code step-1): step + 1."""
        return step + 1

    def latent_inputs(
        self, text_ids: Sequence[int] | np.ndarray, codes: Sequence[int] | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, slice]:
        """The teacher-forced latent pass: [prefix | start, c_0..c_{n-1}, stop] at mel positions 0..n+1.
        Returns (ids, positions, rows) where hidden[rows] is the (n, D) latent."""
        ids, pos = self.prefix(text_ids)
        c = np.asarray(codes, dtype=np.int64).reshape(-1)
        mel = np.concatenate([[self.start_mel], c, [self.stop_mel]])
        p = ids.size
        return (
            np.concatenate([ids, mel]),
            np.concatenate([pos, np.arange(mel.size)]),
            slice(p, p + c.size),
        )

    def to_json(self) -> dict[str, Any]:
        derived = ("vocab_size", "text_offset", "text_pos_offset", "zero_position")
        out = {**asdict(self), **{k: getattr(self, k) for k in derived}}
        return {**out, "output_vocab_size": self.n_mel, "prompt_vocab_size": self.n_conds}


def merged_tables(state: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(merged token table [mel | text], merged position table [mel_pos | text_pos | 0])."""
    mel, text = state["mel_embedding.weight"], state["text_embedding.weight"]
    mpos, tpos = state["mel_pos_embedding.emb.weight"], state["text_pos_embedding.emb.weight"]
    tok = np.concatenate([mel, text], axis=0).astype(np.float32)
    pos = np.concatenate([mpos, tpos, np.zeros((1, mpos.shape[1]), mpos.dtype)], axis=0).astype(np.float32)
    return tok, pos


def prompt_table(conds: np.ndarray) -> np.ndarray:
    """(B, n_conds, D) conditioning rows -> the flattened (B * n_conds, D) table; line b uses task b."""
    c = np.asarray(conds, dtype=np.float32)
    return c.reshape(-1, c.shape[-1])


def conds_rows(spk_latents: np.ndarray, emovec: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """(num_latents, D) + (D,) + speed_emb (2, D) -> the (num_latents + 2, D) conditioning rows."""
    lat = np.asarray(spk_latents, np.float32) + np.asarray(emovec, np.float32).reshape(1, -1)
    return np.concatenate([lat, speed[1:2], speed[0:1]], axis=0).astype(np.float32)


def emulate_inputs(
    merged_ids: np.ndarray,
    prompt_table: np.ndarray,
    position_ids: np.ndarray,
    merged_table: np.ndarray,
    merged_pos_table: np.ndarray,
    *,
    tasks: np.ndarray | Sequence[int] | int = 0,
    prompt_vocab_size: int | None = None,
) -> np.ndarray:
    """Host-side emulation of TensorRT-LLM's input embedding with prompt tuning and learned positions:
    id < vocab -> merged_table[id]; id >= vocab -> prompt_table[task * prompt_vocab_size + id - vocab];
    then + merged_pos_table[position]. merged_ids/position_ids (T,) or (B, T); tasks per row."""
    ids = np.asarray(merged_ids, dtype=np.int64)
    pos = np.asarray(position_ids, dtype=np.int64)
    if ids.shape != pos.shape:
        raise ValueError(f"ids {ids.shape} and positions {pos.shape} differ")
    squeeze = ids.ndim == 1
    ids, pos = np.atleast_2d(ids), np.atleast_2d(pos)
    vocab = merged_table.shape[0]
    pvs = prompt_vocab_size if prompt_vocab_size is not None else prompt_table.shape[0]
    task = np.broadcast_to(np.asarray(tasks, dtype=np.int64).reshape(-1, 1), ids.shape)
    fake = ids >= vocab
    prow = task * pvs + (ids - vocab)
    if np.any(fake & ((ids - vocab >= pvs) | (prow >= prompt_table.shape[0]))):
        raise ValueError("a prompt-table id points past the prompt table")
    out = (
        np.where(
            fake[..., None],
            prompt_table[np.where(fake, prow, 0)],
            merged_table[np.where(fake, 0, ids)],
        )
        + merged_pos_table[pos]
    )
    return out[0] if squeeze else out


# ------------------------------------------------------------------------------------------ weights


# (TensorRT-LLM name, gpt.pth name, HF Conv1D whose weight is stored (in, out)) of each block's tensors
_LAYER_NAMES = (
    ("input_layernorm", "ln_1", False),
    ("attention.qkv", "attn.c_attn", True),
    ("attention.dense", "attn.c_proj", True),
    ("post_layernorm", "ln_2", False),
    ("mlp.fc", "mlp.c_fc", True),
    ("mlp.proj", "mlp.c_proj", True),
)


def _t(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32).T)


def convert_weights(state: Mapping[str, np.ndarray], layers: int) -> dict[str, np.ndarray]:
    """Official gpt.pth tensors (numpy, float32) -> TensorRT-LLM GPT tensor names (float32).

    HF GPT-2 Conv1D weights are stored (in, out); TensorRT-LLM's Linear wants (out, in), hence the
    transposes. c_attn's columns are already [q | k | v] with heads contiguous, which is the order of
    TensorRT-LLM's fused `attention.qkv` at tp_size 1."""
    tok, pos = merged_tables(state)
    w: dict[str, np.ndarray] = {
        "transformer.vocab_embedding.weight": tok,
        "transformer.position_embedding.weight": pos,
    }
    for i in range(layers):
        src, dst = f"gpt.h.{i}", f"transformer.layers.{i}"
        for ours, theirs, conv1d in _LAYER_NAMES:
            for kind in ("weight", "bias"):
                a = state[f"{src}.{theirs}.{kind}"]
                w[f"{dst}.{ours}.{kind}"] = _t(a) if conv1d and kind == "weight" else a
    w["transformer.ln_f.weight"] = state["gpt.ln_f.weight"]
    w["transformer.ln_f.bias"] = state["gpt.ln_f.bias"]
    w["transformer.ln_f.final_norm.weight"] = state["final_norm.weight"]
    w["transformer.ln_f.final_norm.bias"] = state["final_norm.bias"]
    # The head spans the merged vocabulary so TensorRT-LLM's runtime (which sizes logits by vocab_size)
    # works unchanged: mel rows = mel_head (nn.Linear: already (out, in)), text rows zero weight and a
    # bias of MASKED_LOGIT, so no sampler ever picks a text id.
    head = state["mel_head.weight"]
    n_text = tok.shape[0] - head.shape[0]
    w["lm_head.weight"] = np.concatenate([head, np.zeros((n_text, head.shape[1]), head.dtype)], axis=0)
    w["lm_head.bias"] = np.concatenate([state["mel_head.bias"], np.full(n_text, MASKED_LOGIT, np.float32)])
    return {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in w.items()}


def n_conds_from_state(state: Mapping[str, np.ndarray]) -> int:
    """Conditioning rows per line: the speaker perceiver's latents + the two speed rows."""
    return int(state["perceiver_encoder.latents"].shape[0]) + 2


def layout_from_state(
    state: Mapping[str, np.ndarray],
    *,
    n_conds: int,
    tokens: Mapping[str, int] | None = None,
    text_in_prompt: bool = False,
) -> MergedLayout:
    t = dict(tokens or {})
    return MergedLayout(
        text_in_prompt=int(text_in_prompt),
        n_mel=int(state["mel_embedding.weight"].shape[0]),
        text_vocab=int(state["text_embedding.weight"].shape[0]),
        mel_pos_rows=int(state["mel_pos_embedding.emb.weight"].shape[0]),
        text_pos_rows=int(state["text_pos_embedding.emb.weight"].shape[0]),
        n_conds=n_conds,
        **{k: int(v) for k, v in t.items() if k in ("start_mel", "stop_mel", "start_text", "stop_text")},
    )


def make_config(
    layout: MergedLayout,
    *,
    hidden_size: int,
    layers: int,
    heads: int,
    intermediate_size: int,
    precision: str = "fp16",
    norm_epsilon: float = 1e-5,
    max_beam_width: int = 3,
) -> dict[str, Any]:
    """config.json in TensorRT-LLM's PretrainedConfig/GPTConfig form, plus our `indextts2` section."""
    if precision not in DTYPES:
        raise ValueError(f"precision {precision!r}; allowed: {', '.join(DTYPES)}")
    return {
        "architecture": ARCHITECTURE,
        "dtype": DTYPES[precision],
        "vocab_size": layout.vocab_size,
        "hidden_size": hidden_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_size": hidden_size // heads,
        "intermediate_size": intermediate_size,
        "hidden_act": "gelu_new",  # HF GPT-2's tanh approximation
        "norm_epsilon": norm_epsilon,
        "position_embedding_type": "learned_absolute",
        "max_position_embeddings": layout.max_position_embeddings,
        "gpt_variant": "gpt2",
        "bias": True,
        "q_scaling": 1.0,
        "embedding_scale": None,
        "apply_query_key_layer_scaling": False,
        "share_embedding_table": False,
        "use_parallel_embedding": False,
        "embedding_sharding_dim": 0,
        "logits_dtype": "float32",
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
        "quantization": {"quant_algo": QUANT_ALGOS[precision], "kv_cache_quant_algo": None},
        "indextts2": {
            **layout.to_json(),
            "final_norm": True,  # second LayerNorm on the head path (see module docstring)
            "lm_head_bias": True,
            "hidden_output": "last_hidden_state",  # after ln_f AND final_norm
            "max_beam_width": max_beam_width,
            "max_prompt_embedding_table_size_per_line": layout.n_conds,
            "weights_finalized": QUANT_ALGOS[precision] is None,
        },
    }


# ------------------------------------------------------------------------------------------ checkpoint


def write_checkpoint(
    out_dir: Path | str,
    state: Mapping[str, np.ndarray],
    *,
    heads: int,
    n_conds: int,
    precision: str = "fp16",
    norm_epsilon: float = 1e-5,
    tokens: Mapping[str, int] | None = None,
    max_beam_width: int = 3,
    text_in_prompt: bool = False,
) -> Path:
    """Write config.json + rank0.safetensors for the GPT of `state` (official gpt.pth names, numpy).
    `heads` comes from config.yaml (tensors do not carry it); n_conds = num_latents + 2 (IndexTTS-2.5,
    `text_in_prompt`: 3 + the text positions, see MergedLayout.text_in_prompt)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    layers = len({k.split(".")[2] for k in state if k.startswith("gpt.h.")})
    layout = layout_from_state(state, n_conds=n_conds, tokens=tokens, text_in_prompt=text_in_prompt)
    weights = convert_weights(state, layers)
    d = weights["transformer.ln_f.weight"].shape[0]
    cfg = make_config(
        layout,
        hidden_size=int(d),
        layers=layers,
        heads=heads,
        intermediate_size=int(weights["transformer.layers.0.mlp.fc.weight"].shape[0]),
        precision=precision,
        norm_epsilon=norm_epsilon,
        max_beam_width=max_beam_width,
    )
    if d % heads:
        raise ValueError(f"hidden size {d} is not divisible by {heads} heads")
    write_safetensors(out / WEIGHTS_FILE, weights, dtype=cfg["dtype"])
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    os.replace(tmp, out / CONFIG_FILE)
    return out


def state_from_gpt_pth(path: Path | str) -> dict[str, np.ndarray]:
    """Build side helper (needs torch): the official gpt.pth as float32 numpy arrays."""
    import torch

    obj = torch.load(str(path), map_location="cpu", weights_only=True)
    if isinstance(obj, Mapping) and "model" in obj and isinstance(obj["model"], Mapping):
        obj = obj["model"]
    return {k: v.float().numpy() for k, v in obj.items() if hasattr(v, "float")}


# ------------------------------------------------------------------------------------------ reference


def reference_forward(
    weights: Mapping[str, np.ndarray], config: Mapping[str, Any], inputs_embeds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What the engine computes, in float64 numpy, from the converted checkpoint (`gpt2_numpy.forward`,
    one causal pass): inputs_embeds (T, D) -> (hidden after both norms (T, D), logits (T, vocab_size);
    the mel codes are the first output_vocab_size columns)."""
    hidden, logits, _ = gpt2_numpy.forward(weights, config, np.asarray(inputs_embeds)[None])
    return hidden[0], logits[0]


def emulate_weight_only(w: np.ndarray, bits: int) -> np.ndarray:
    """Per-output-channel symmetric int8/int4 rounding of a (out, in) weight, as W8A16/W4A16 store it
    (scale = max|w| / 127 or / 7 per output row); returns the dequantized weight."""
    qmax = {8: 127, 4: 7}[bits]
    a = np.asarray(w, dtype=np.float64)
    scale = np.abs(a).max(axis=1, keepdims=True) / qmax
    scale = np.where(scale > 0, scale, 1.0)
    return (np.clip(np.round(a / scale), -qmax - 1, qmax) * scale).astype(np.float32)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) == 3 and sys.argv[1] == "finalize":
        finalize(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "build":
        build_engine_cli(*sys.argv[2:])
    else:
        sys.exit(
            "usage (in the TensorRT-LLM environment): python trtllm_convert.py finalize CHECKPOINT_DIR\n"
            "       python trtllm_convert.py build CHECKPOINT_DIR ENGINE_DIR [trtllm-build flags]"
        )
