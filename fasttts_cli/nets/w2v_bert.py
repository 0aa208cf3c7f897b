"""w2v-BERT 2.0 semantic features, cut at the layer IndexTTS-2 reads (hidden_states[17]), plus its stats.

transformers' `Wav2Vec2BertModel` supplies the layers (so the official `hf_cache/w2v-bert-2.0` snapshot
loads unchanged); only the first 17 encoder layers are built and run, since `hidden_states[17]` is the
output of encoder layer 17 and the original discards the rest. The wrapper drives the layers itself with a
plain additive key mask instead of calling `model.forward`, so the graph has no mask-building helpers and
exports cleanly to ONNX with dynamic batch and time axes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from fasttts_cli.errors import InputError
from fasttts_cli.nets.weights import checkpoint_file, safetensors_load, strict_load, torch_load

W2V_LAYER = 17  # the original uses hidden_states[17]: the output of encoder layer 17 (index 0 = projection)


def _relative_key_bias(module: nn.Module, query: torch.Tensor, key: torch.Tensor):
    """transformers' relative-key position scores, q[b,h,l] . E[clamp(r - l)], as one batched matmul
    over query positions. transformers writes it as an einsum, which ONNX Runtime runs with a generic
    Einsum kernel: 12% of a w2v-BERT pass; the matmul form gives the same sums."""
    b, h, q_len, d = query.shape
    k_len = key.shape[2]
    left, right = module.left_max_position_embeddings, module.right_max_position_embeddings
    distance = torch.arange(k_len, device=query.device).view(1, -1) - torch.arange(
        q_len, device=query.device
    ).view(-1, 1)
    table = module.distance_embedding(distance.clamp(-left, right) + left).to(query.dtype)  # (L, R, D)
    scores = torch.matmul(query.permute(2, 0, 1, 3).reshape(q_len, b * h, d), table.transpose(1, 2))
    return query, scores.reshape(q_len, b, h, k_len).permute(1, 2, 0, 3) * module.scaling


@contextmanager
def _matmul_relative_keys() -> Iterator[None]:
    """Route transformers' relative-key helper to `_relative_key_bias` while our layers run."""
    from transformers.models.wav2vec2_bert import modeling_wav2vec2_bert as hf

    name = "_apply_relative_key_position_encoding"
    original = getattr(hf, name, None)
    if original is None:  # another transformers layout: keep its own computation
        yield
        return
    setattr(hf, name, _relative_key_bias)
    try:
        yield
    finally:
        setattr(hf, name, original)


def _conv_module_as_matmuls(module: nn.Module, hidden_states: torch.Tensor, attention_mask=None):
    """transformers' conformer convolution module with its two pointwise (kernel 1) convolutions as
    matmuls on the (B, T, C) layout. Same function; ONNX Runtime runs a kernel-1 Conv below its MatMul
    rate and needs two more (C, T) <-> (T, C) transposes around the LayerNorm (4 full-size modules at
    199 frames on 1 thread, 60 alternating runs: 72.5 -> 66.7 ms)."""
    h = module.layer_norm(hidden_states)
    if attention_mask is not None:
        h = h.masked_fill(~attention_mask.bool().unsqueeze(-1), 0.0)
    h = nn.functional.glu(torch.matmul(h, module.pointwise_conv1.weight[:, :, 0].t()), dim=-1)
    h = h.transpose(1, 2)
    h = module.depthwise_conv(nn.functional.pad(h, (module.depthwise_conv.kernel_size[0] - 1, 0)))
    h = module.activation(module.depthwise_layer_norm(h.transpose(1, 2)))
    return torch.matmul(h, module.pointwise_conv2.weight[:, :, 0].t())


@contextmanager
def _conv_modules_as_matmuls() -> Iterator[None]:
    from transformers.models.wav2vec2_bert import modeling_wav2vec2_bert as hf

    cls = hf.Wav2Vec2BertConvolutionModule
    original = cls.forward
    cls.forward = _conv_module_as_matmuls
    try:
        yield
    finally:
        cls.forward = original


class W2VBertFeatures(nn.Module):
    """`(input_features (B,T,160) f32, attention_mask (B,T) int64) -> spk_cond_emb (B,T,1024) f32`.

    spk_cond_emb = (hidden_states[layer] - mean) / sqrt(var), without epsilon, as the original computes it.
    Padded frames (mask 0) are zeroed before the encoder and masked as attention keys, exactly as
    transformers does, so each row equals its unpadded computation on its valid frames.
    """

    def __init__(
        self,
        model: nn.Module,
        mean: torch.Tensor,
        var: torch.Tensor,
        layer: int = W2V_LAYER,
        depth: int | None = None,
    ):
        super().__init__()
        self.depth = layer if depth is None else depth
        if len(model.encoder.layers) < max(layer, self.depth):
            raise ValueError(f"w2v-BERT has {len(model.encoder.layers)} layers, layer {layer} is needed")
        self.model = model
        self.layer = layer
        self.register_buffer("mean", mean.detach().float().reshape(-1).clone())
        self.register_buffer("std", torch.sqrt(var.detach().float().reshape(-1)))

    def hidden(
        self, input_features: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden_states[0], hidden_states[layer]) before normalisation."""
        h, _ = self.model.feature_projection(input_features)
        valid = attention_mask.to(torch.bool)
        h = h.masked_fill(~valid.unsqueeze(-1), 0.0)
        h0 = h
        # additive key mask (B,1,1,T): 0 where valid, the dtype's minimum where padded
        key_mask = (~valid).to(h.dtype)[:, None, None, :] * torch.finfo(h.dtype).min
        out = h
        with _matmul_relative_keys(), _conv_modules_as_matmuls():
            # `depth` > `layer` runs the layers the original runs and discards (benchmarks only)
            for i, block in enumerate(self.model.encoder.layers[: self.depth], start=1):
                h = block(
                    h,
                    attention_mask=key_mask,
                    relative_position_embeddings=None,
                    conv_attention_mask=attention_mask,
                )
                if i == self.layer:
                    out = h
        return h0, out

    def forward(self, input_features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        _, h = self.hidden(input_features, attention_mask)
        return (h - self.mean) / self.std


def _w2v_config(folder: Path, layer: int, all_layers: bool = False):
    from transformers import Wav2Vec2BertConfig

    cfg_path = folder / "config.json"
    with checkpoint_file(cfg_path, hint="the w2v-bert-2.0 folder needs config.json"):
        cfg = Wav2Vec2BertConfig.from_json_file(str(cfg_path))
    if cfg.position_embeddings_type != "relative_key":
        # The other types are transformers features IndexTTS-2 never used; reject rather than guess.
        raise InputError(
            cfg_path, f"position_embeddings_type {cfg.position_embeddings_type!r} is not supported"
        )
    if cfg.num_hidden_layers < layer:
        raise InputError(cfg_path, f"num_hidden_layers is {cfg.num_hidden_layers}; layer {layer} is needed")
    if not all_layers:  # layers past `layer` are never built nor run (benchmarks may ask for them)
        cfg.num_hidden_layers = layer
    cfg.add_adapter = False
    cfg._attn_implementation = "eager"  # position bias + plain additive mask; traces/exports as matmuls
    return cfg


def load_w2v_bert(
    folder: Path | str, stats_path: Path | str, layer: int = W2V_LAYER, *, all_layers: bool = False
) -> W2VBertFeatures:
    """Load `hf_cache/w2v-bert-2.0` (config.json + model.safetensors) and `wav2vec2bert_stats.pt`, strictly.

    Keys of encoder layers past `layer` are skipped; any other missing/unexpected key is an error naming it.
    `all_layers` builds and runs every layer of the config, as the original does (only the benchmark's
    eager side wants that: the output is the same layer-`layer` features, at the original's cost).
    """
    from transformers import Wav2Vec2BertModel

    folder, stats_path = Path(folder), Path(stats_path)
    cfg = _w2v_config(folder, layer, all_layers)
    weights = folder / "model.safetensors"
    state = safetensors_load(weights, hint="the w2v-bert-2.0 folder needs model.safetensors")
    state = {k.removeprefix("wav2vec2_bert."): v for k, v in state.items()}  # hub snapshots may carry it
    n_file = 1 + max((int(k.split(".")[2]) for k in state if k.startswith("encoder.layers.")), default=-1)
    with torch.device("meta"):
        model = Wav2Vec2BertModel(cfg)
    model = model.to_empty(device="cpu")
    skip = [f"encoder.layers.{i}." for i in range(cfg.num_hidden_layers, n_file)]
    strict_load(model, state, weights, ignore=skip)
    model.eval()

    stats = torch_load(stats_path)
    if not isinstance(stats, dict) or "mean" not in stats or "var" not in stats:
        raise InputError(stats_path, "expected a dict with 'mean' and 'var'")
    hidden = cfg.hidden_size
    for k in ("mean", "var"):
        if stats[k].numel() != hidden:
            raise InputError(stats_path, f"'{k}' has {stats[k].numel()} values, w2v-BERT width is {hidden}")
    return W2VBertFeatures(model, stats["mean"], stats["var"], layer, cfg.num_hidden_layers).eval()
