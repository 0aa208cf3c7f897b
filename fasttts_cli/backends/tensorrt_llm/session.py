"""The worker's `trtllm` backend: the engine through TensorRT-LLM 1.2's Python runtime,
`tensorrt_llm.runtime.GenerationSession`, driven one step at a time by the client's requests.

What it relies on, read in NVIDIA/TensorRT-LLM 1.2.0rc2 (`tensorrt_llm/runtime/generation.py`,
`runtime/model_runner.py`, `builder.py`, `models/modeling_utils.py`; the engine-backend runtime 1.2 still
ships); CI runs it against the fake library `tools/fakes/trtllm.py`, which follows that order:
- `Engine.from_dir(dir, rank)` -> `EngineConfig.from_json_str` -> `PretrainedConfig.from_dict`, which
  resolves `architecture` through `tensorrt_llm.models.MODEL_MAP`: our class must be registered first
  (`architecture.register_architecture`), in this process too, not only in the build's.
- `model_runner._engine_config_to_model_config(engine.config)` gives the `ModelConfig` that
  `GenerationSession(model_config, engine_buffer, mapping, debug_mode=True)` takes (debug_mode skips the
  strict IO-name check that our extra output `last_hidden_state` would fail; it is switched off after).
- `decode(...)` calls `handle_per_step` per step, which (a) runs the engine on the context bound for this
  step, (b) prepares step s + 1 and binds its output `logits` to `self.buffer['logits']` (through
  `_get_next_step_shape_buffer`), THEN (c) calls the logits processor with that same tensor and stores
  its return value as `self.buffer['logits']`, (d) samples from it. A processor that returns a new
  tensor leaves the engine writing step s + 1 into a buffer nobody reads: from step 1 on the client would
  get the previous step's forced logits. So `_on_step` copies the logits to the host, then overwrites
  that tensor in place and returns it.
- With a logits processor, each step calls `finalize_decoder(..., in_progress=True)`, which deep-copies
  the beam-hypothesis buffers unless `SamplingConfig(use_beam_hyps=False)`: beams are our batch rows
  (beam width 1 here), so the hypotheses are never used and the session is built without them.
- `_prepare_context_inputs` / `_prepare_generation_inputs(..., step=s)` return the 'position_ids' that
  feed the engine; the latter prepares step s + 1, whose input is code s, at mel position s + 2.
- Contiguous KV caches (`--kv_cache_type continuous`) are `self.buffer['present_key_value_<i>']` of
  shape (rows, 2, heads, max_seq_len, head_size); a parent change copies the moved rows' filled prefix
  in place (the engine's bindings stay valid), not the whole max-length cache.

Build requirements: `--gpt_attention_plugin` on, `--remove_input_padding enable`, `--kv_cache_type
continuous` (a paged cache cannot be reordered by a row gather), `--max_beam_width 1` (beams are batch
rows here), `--max_batch_size` >= lines x beams, prompt table >= rows x n_conds.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.tensorrt_llm import protocol
from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.backends.tensorrt_llm.architecture import register_architecture
from fasttts_cli.backends.tensorrt_llm.protocol import Channel, EngineError, Frame, Lines, RequestError

FORCED_LOGIT = -1e4  # every other logit of a forced step: greedy decoding then picks exactly our token
_BUILD_FLAGS = (
    ("use_gpt_attention_plugin", True, "--gpt_attention_plugin auto"),
    ("remove_input_padding", True, "--remove_input_padding enable"),
    ("paged_kv_cache", False, "--kv_cache_type continuous"),
)


class _Handoff(Exception):  # control flow, not an error
    """Unwinds TensorRT-LLM's decode loop when the client sends something other than a step."""

    def __init__(self, frame: Frame | None) -> None:
        super().__init__("handoff")
        self.frame = frame


def reorder_rows(buffers: Sequence[Any], parents: np.ndarray, length: int) -> int:
    """Row r of each (rows, 2, heads, seq, head) cache continues from row parents[r]: copy the first
    `length` positions of the rows that move, in place. Returns how many rows moved."""
    moved = np.flatnonzero(parents != np.arange(parents.size))
    if moved.size == 0:
        return 0
    import torch

    for buf in buffers:
        dst = torch.as_tensor(moved, device=buf.device)
        src = torch.as_tensor(parents[moved], device=buf.device)
        n = min(int(length), int(buf.shape[3]))
        buf[dst, :, :, :n] = buf[src, :, :, :n]  # the right side is gathered first: no aliasing
    return int(moved.size)


class TrtllmBackend:
    """The `Backend` over a built engine folder (config.json + rank0.engine)."""

    name = "trtllm"

    def __init__(self, engine_dir: Path) -> None:
        try:
            import torch
            from tensorrt_llm.builder import Engine
            from tensorrt_llm.runtime import SamplingConfig
            from tensorrt_llm.runtime.model_runner import _engine_config_to_model_config

            register_architecture()
        except ImportError as e:
            raise EngineError(f"tensorrt_llm is not importable in {sys.executable}: {e}") from None
        self.torch = torch
        self.SamplingConfig = SamplingConfig
        try:
            engine = Engine.from_dir(str(engine_dir), rank=0)
        except Exception as e:
            raise EngineError(f"{engine_dir}: TensorRT-LLM cannot load the engine: {e!r}") from None
        pretrained = engine.config.pretrained_config
        cfg = pretrained.to_dict() if hasattr(pretrained, "to_dict") else dict(vars(pretrained))
        try:
            self.layout = protocol.layout_from_config({"pretrained_config": cfg}, engine_dir)
        except EngineError:  # PretrainedConfig may not carry our extra section: read the file itself
            raw = json.loads((engine_dir / tc.CONFIG_FILE).read_text(encoding="utf-8"))
            self.layout = protocol.layout_from_config(raw, engine_dir)
        self.hidden_size = int(cfg["hidden_size"])
        session = _session_class()(
            _engine_config_to_model_config(engine.config), engine.engine, pretrained.mapping, debug_mode=True
        )
        session.debug_mode = False  # left on, it would dump every step's tensors
        for flag, want, hint in _BUILD_FLAGS:
            if bool(getattr(session, flag)) != want:
                raise EngineError(f"{engine_dir}: this runtime needs an engine built with {hint}")
        session.hidden_size_ = self.hidden_size
        self.session = session
        self.vocab = int(cfg["vocab_size"])
        self.gen: protocol.GenState | None = None
        self.chan: Channel | None = None
        self._capture: dict[str, Any] = {}

    def _on_step(self, step: int, _ids: Any, logits: Any) -> Any:
        """The logits processor: one call per engine step, inside handle_per_step (module docstring)."""
        torch, s = self.torch, self.session
        if self._capture.get("latent"):  # one context pass: keep every position's hidden state
            self._capture["hidden"] = s.hidden_context.detach().float().cpu().numpy().copy()
            raise _Handoff(None)
        assert self.gen is not None and self.chan is not None
        if step == 0:  # context: the hidden buffer is packed [tokens, D]; each row's last token
            last = torch.cumsum(s.context_lengths_host, 0) - 1
            hid = s.hidden_context[last.to(s.hidden_context.device)]
        else:
            hid = s.hidden_step
        # to the host first: the tensor is overwritten below, and the engine writes the next step into it
        host_logits = np.array(logits[:, : self.layout.n_mel].detach().float().cpu().numpy(), copy=True)
        host_hidden = np.array(hid.detach().float().cpu().numpy(), copy=True)
        self.chan.reply({"ok": True}, {"logits": host_logits, "hidden": host_hidden})
        while True:
            frame = self.chan.read()
            if frame is None or frame[0].get("op") != "step":
                raise _Handoff(frame)
            try:
                parents, tokens = self.gen.check_step(frame[1], self.layout)
            except RequestError as e:
                self.chan.reply_error(str(e), "request")
                continue
            break
        caches = [buf for key, buf in s.buffer.items() if key.startswith("present_key_value")]
        reorder_rows(caches, parents, int(s.max_context_length) + step)  # the cache's filled prefix
        self.gen.step += 1
        logits.fill_(FORCED_LOGIT)  # in place: this is the tensor the session keeps and the engine fills
        logits[
            torch.arange(tokens.size, device=logits.device), torch.as_tensor(tokens, device=logits.device)
        ] = 0
        return logits

    def _decode(
        self, lines: Lines, per_row: list[tuple[np.ndarray, np.ndarray]], tasks: np.ndarray, steps: int
    ) -> None:
        torch, s = self.torch, self.session
        dev = s.device
        ids = torch.as_tensor(np.concatenate([i for i, _ in per_row]).astype(np.int32), device=dev)
        lens = np.array([i.size for i, _ in per_row], dtype=np.int32)
        s.context_positions = torch.as_tensor(
            np.concatenate([p for _, p in per_row]).astype(np.int32), device=dev
        )
        s.context_lengths_host = torch.as_tensor(lens.astype(np.int64))
        s.total_tokens = int(lens.sum())
        table = torch.as_tensor(tc.prompt_table(lines.conds), device=dev).to(s.dtype_torch)
        # end id: the last merged (text) id, whose head bias is MASKED_LOGIT: never our token.
        # use_beam_hyps=False: no per-step deep copy of beam hypotheses (module docstring)
        scfg = self.SamplingConfig(
            end_id=self.vocab - 1, pad_id=self.vocab - 1, top_k=1, num_beams=1, use_beam_hyps=False
        )
        s.setup(len(per_row), int(lens.max()), steps + 1, beam_width=1)
        # tasks: one per row (its line's block of the table); the session expands them per token itself
        s.decode(
            ids,
            torch.as_tensor(lens, device=dev),
            scfg,
            prompt_embedding_table=table,
            tasks=torch.as_tensor(tasks.astype(np.int32), device=dev),
            prompt_vocab_size=torch.tensor([self.layout.n_conds], dtype=torch.int32, device=dev),
            logits_processor=self._on_step,
        )

    def prefill(self, lines: Lines, rows: np.ndarray, max_steps: int, chan: Channel) -> Frame | None:
        ctx = protocol.line_inputs(self.layout, lines)
        src = np.repeat(np.arange(len(ctx)), rows)
        self.gen, self.chan, self._capture = protocol.GenState(src, max_steps), chan, {}
        try:
            self._decode(lines, [(ctx[b][0], ctx[b][1]) for b in src], src, max_steps)
        except _Handoff as h:
            self.gen = None
            return h.frame
        self.gen = None
        return chan.read()  # the loop ran out of steps: the next request is handled by the main loop

    def handle_step(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise RequestError("step without a running generation (prefill first, and stay within max_steps)")

    def end(self) -> None:
        self.gen = None

    def latent(self, lines: Lines, codes: list[np.ndarray]) -> np.ndarray:
        ctx = protocol.line_inputs(self.layout, lines, codes)
        self.gen, self._capture = protocol.GenState(np.arange(len(ctx)), 0), {"latent": True}
        with contextlib.suppress(_Handoff):  # raised on purpose after the context pass
            self._decode(lines, [(i, p) for i, p, _ in ctx], np.arange(len(ctx)), 0)
        hidden = self._capture.pop("hidden")
        self.gen = None
        out, start = [], 0
        for ids, _, rows in ctx:
            assert rows is not None
            out.append(hidden[start + rows.start : start + rows.stop])
            start += ids.size
        return np.concatenate(out, axis=0)


def _session_class() -> type:
    """GenerationSession with our position ids and the `last_hidden_state` output bound."""
    import torch
    from tensorrt_llm.runtime import GenerationSession
    from tensorrt_llm.runtime.generation import RuntimeTensor

    class IndexTTS2Session(GenerationSession):  # type: ignore[misc, valid-type]
        context_positions: Any = None
        context_lengths_host: Any = None
        total_tokens = 0
        hidden_size_ = 0
        hidden_context: Any = None
        hidden_step: Any = None

        @property
        def dtype_torch(self) -> Any:
            return self._tensor_dtype("last_hidden_state")

        def _prepare_context_inputs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            ret = super()._prepare_context_inputs(*args, **kwargs)
            ret["position_ids"] = self.context_positions  # [zero row | text | mel 0], packed
            return ret

        def _prepare_generation_inputs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            step = int(kwargs["step"])  # read before the base class pops it from kwargs
            ret = super()._prepare_generation_inputs(*args, **kwargs)
            ret["position_ids"] = torch.full_like(ret["position_ids"], step + 2)  # code s at mel s + 2
            return ret

        def _get_context_shape_buffer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            tensors = super()._get_context_shape_buffer(*args, **kwargs)
            self.hidden_context = torch.empty(
                (self.total_tokens, self.hidden_size_), dtype=self.dtype_torch, device=self.device
            )
            tensors["last_hidden_state"] = RuntimeTensor.from_torch("last_hidden_state", self.hidden_context)
            return tensors

        def _get_next_step_shape_buffer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            tensors = super()._get_next_step_shape_buffer(*args, **kwargs)
            rows = int(self.context_lengths_host.numel())
            if self.hidden_step is None or self.hidden_step.shape[0] != rows:
                self.hidden_step = torch.empty(
                    (rows, self.hidden_size_), dtype=self.dtype_torch, device=self.device
                )
            tensors["last_hidden_state"] = RuntimeTensor.from_torch("last_hidden_state", self.hidden_step)
            return tensors

    return IndexTTS2Session
