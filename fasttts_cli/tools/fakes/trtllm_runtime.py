"""The fake TensorRT-LLM's `GenerationSession`, on torch CPU (its plain types: `trtllm_types.py`).

`handle_per_step` keeps the real order of tensorrt_llm 1.2 `runtime/generation.py` (GenerationSession.
handle_per_step), which the worker depends on:
  1. step 0: `_prepare_context_inputs`, `_get_context_shape_buffer`, bind them to the context profile;
  2. run the engine on this step's context: it writes into the tensors BOUND there (logits, KV, hidden);
  3. step 0: `sequence_length_buffer = context_lengths`;
  4. unless last step: `_prepare_generation_inputs(step=s)`, `_get_next_step_shape_buffer` (binds
     `self.buffer['logits']` as the next step's output) and bind them to the other context;
  5. `logits = self.buffer['logits']`; with a logits processor: `finalize_decoder(in_progress=True)`
     (deep-copies the beam hypotheses when `scfg.use_beam_hyps`), `logits = processor(step, ids, logits)`,
     `self.buffer['logits'] = logits`;
  6. the dynamic decoder samples from `logits` (greedy: top_k 1 is all the worker uses) into `new_tokens`,
     which the next step reads as its `input_ids`.
So a processor that returns a new tensor sees, from step 1 on, the tensor it returned the step before.

The engine is a CPU stand-in that computes real logits from the converted checkpoint with the package's
one numpy GPT-2 (`backends/tensorrt_llm/gpt2_numpy.py`), KV cache in the session's buffers.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from fasttts_cli.tools.fakes.trtllm_types import (
    KVCacheType,
    ModelConfig,
    RuntimeTensor,
    SamplingConfig,
    _Runtime,
    engine_io_names,
    parse_engine,
)

_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# the positional parameters of the real _get_context_shape_buffer / _get_next_step_shape_buffer, in order
_TAIL = ("attention_mask", "cross_attention_mask", "cache_indirection", "kv_cache_block_offsets")
_TAIL += ("host_kv_cache_block_offsets", "cross_kv_cache_block_offsets", "host_cross_kv_cache_block_offsets")
_TAIL += ("hidden_states_input", "prompt_embedding_table", "tasks", "prompt_vocab_size", "encoder_output")
_TAIL += ("encoder_input_lengths", "host_runtime_perf_knobs", "host_context_progress")
_TAIL += ("skip_cross_attn_blocks", "language_adapter_routings")
_CTX_ARGS = ("input_ids", "context_lengths", "host_context_lengths", "position_ids", "last_token_ids", *_TAIL)
_NEXT_ARGS = ("batch_size", "beam_width", "max_context_length", "step", "context_lengths")
_NEXT_ARGS += ("host_context_lengths", "position_ids", "last_token_ids", *_TAIL)


def _named(names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> SimpleNamespace:
    """Bind a call to a parameter list as Python would (TypeError for too many or unknown ones)."""
    if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[: len(args)]):
        raise TypeError(f"bad call: {len(args)} positional, keywords {sorted(kwargs)}")
    return SimpleNamespace(**{**dict.fromkeys(names), **dict(zip(names, args, strict=False)), **kwargs})


class GenerationSession:
    def __init__(
        self,
        model_config: ModelConfig,
        engine_buffer: bytes,
        mapping: Any,
        debug_mode: bool = False,
        **_: Any,
    ) -> None:
        self._model_config, self.mapping, self.debug_mode = model_config, mapping, debug_mode
        header, weights = parse_engine(engine_buffer)
        self.io_names, self.engine_dtype = list(header["io"]), header["dtype"]
        self.weights = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        self.config = model_config.extra
        expected = set(engine_io_names(model_config.num_layers, {"max_prompt_embedding_table_size": 1}, ()))
        if not model_config.max_prompt_embedding_table_size:
            expected -= {"prompt_embedding_table", "tasks", "prompt_vocab_size"}
        if not debug_mode and expected != set(self.io_names):
            raise RuntimeError(
                "Tensor names in engine are not the same as expected, to use this GenerationSession, you "
                f"need to use PretrainedModel.prepare_inputs: unexpected {set(self.io_names) - expected}"
            )
        self.runtime, self.device, self.buffer = _Runtime(), torch.device("cpu"), {}
        self.beam_hyps_copies = 0  # what use_beam_hyps costs with a logits processor (checked by tests)
        self.engine_runs = 0

    # ------------------------------------------------------------------ properties as the real ones
    use_gpt_attention_plugin = property(lambda self: self._model_config.gpt_attention_plugin)
    remove_input_padding = property(lambda self: self._model_config.remove_input_padding)
    kv_cache_type = property(lambda self: self._model_config.kv_cache_type)
    paged_kv_cache = property(lambda self: self._model_config.kv_cache_type == KVCacheType.PAGED)
    vocab_size = property(lambda self: self._model_config.vocab_size)
    num_layers = property(lambda self: self._model_config.num_layers)
    dtype = property(lambda self: _TORCH[self._model_config.dtype])

    def _tensor_dtype(self, name: str) -> torch.dtype:
        if name not in self.io_names:
            raise KeyError(f"no engine IO tensor {name!r}")
        return torch.float32 if name == "logits" else _TORCH[self.engine_dtype]

    def setup(
        self, batch_size: int, max_context_length: int, max_new_tokens: int, beam_width: int = 1, **_: Any
    ):
        if not (self.use_gpt_attention_plugin and self.remove_input_padding) or self.paged_kv_cache:
            raise NotImplementedError(
                "the fake runs plugin + packed input + continuous KV cache engines only"
            )
        self.batch_size, self.max_context_length, self.max_new_tokens = (
            batch_size,
            max_context_length,
            max_new_tokens,
        )
        self.max_seq_length = self.max_attention_window_size = max_context_length + max_new_tokens
        self.beam_width = beam_width
        heads, d = self._model_config.num_kv_heads, self._model_config.hidden_size
        self.buffer = {
            "logits": torch.empty((batch_size, self.vocab_size), dtype=self._tensor_dtype("logits"))
        }
        for i in range(self.num_layers):
            shape = (batch_size, 2, heads, self.max_attention_window_size, d // self._model_config.num_heads)
            self.buffer[f"present_key_value_{i}"] = torch.zeros(
                shape, dtype=self._tensor_dtype("present_key_value_0")
            )
        self.sequence_length_buffer = torch.ones((batch_size,), dtype=torch.int32)

    # ------------------------------------------------------------------ inputs and bindings
    def _prepare_context_inputs(
        self,
        batch_size,
        context_lengths,
        host_context_lengths,
        use_gpt_attention_plugin,
        remove_input_padding,
        **kwargs,
    ):
        kwargs.pop("max_context_length")
        pos = torch.cat([torch.arange(0, int(n), dtype=torch.int32) for n in host_context_lengths])
        return {
            "last_token_ids": torch.cumsum(context_lengths, 0).int(),
            "position_ids": pos,
            "host_runtime_perf_knobs": torch.full((16,), -1, dtype=torch.int64),
        }

    def _prepare_generation_inputs(
        self, batch_size, context_lengths, use_gpt_attention_plugin, remove_input_padding, **kwargs
    ):
        step = kwargs.pop("step")
        return {
            "last_token_ids": torch.cumsum(torch.ones_like(context_lengths), 0).int(),
            "position_ids": context_lengths + step,
            "host_runtime_perf_knobs": torch.full((16,), -1, dtype=torch.int64),
        }

    def _common_bindings(
        self, tensors: dict[str, RuntimeTensor], prompt_embedding_table, prompt_vocab_size
    ) -> None:
        for i in range(self.num_layers):
            kv = self.buffer[f"present_key_value_{i}"]
            for name in (f"past_key_value_{i}", f"present_key_value_{i}"):
                tensors[name] = RuntimeTensor.from_torch(name, kv)
        tensors["logits"] = RuntimeTensor.from_torch("logits", self.buffer["logits"])
        if prompt_embedding_table is not None:
            tensors["prompt_embedding_table"] = RuntimeTensor.from_torch(
                "prompt_embedding_table", prompt_embedding_table
            )
            tensors["prompt_vocab_size"] = RuntimeTensor.from_torch("prompt_vocab_size", prompt_vocab_size)

    def _get_context_shape_buffer(self, *args: Any, **kwargs: Any) -> dict[str, RuntimeTensor]:
        a = _named(_CTX_ARGS, args, kwargs)
        input_ids, context_lengths, tasks = a.input_ids, a.context_lengths, a.tasks
        position_ids, last_token_ids, host_context_lengths = (
            a.position_ids,
            a.last_token_ids,
            a.host_context_lengths,
        )
        prompt_embedding_table, prompt_vocab_size = a.prompt_embedding_table, a.prompt_vocab_size
        t: dict[str, RuntimeTensor] = {}
        self.sequence_length_buffer = context_lengths.detach().clone()
        for name, x in (
            ("input_ids", input_ids),
            ("position_ids", position_ids),
            ("last_token_ids", last_token_ids),
            ("context_lengths", context_lengths),
            ("host_context_lengths", host_context_lengths),
            ("sequence_length", self.sequence_length_buffer),
            ("host_request_types", torch.zeros_like(context_lengths).int()),
        ):
            t[name] = RuntimeTensor.from_torch(name, x)
        if tasks is not None:  # one task per token with packed input, as the real session expands them
            per_token = torch.cat(
                [
                    torch.full((int(n),), int(k), dtype=torch.int32)
                    for n, k in zip(context_lengths, tasks, strict=True)
                ]
            )
            t["tasks"] = RuntimeTensor.from_torch("tasks", per_token)
        self._common_bindings(t, prompt_embedding_table, prompt_vocab_size)
        return t

    def _get_next_step_shape_buffer(self, *args: Any, **kwargs: Any) -> dict[str, RuntimeTensor]:
        a = _named(_NEXT_ARGS, args, kwargs)
        batch_size, beam_width, step, tasks = a.batch_size, a.beam_width, a.step, a.tasks
        max_context_length, context_lengths = a.max_context_length, a.context_lengths
        position_ids, last_token_ids = a.position_ids, a.last_token_ids
        prompt_embedding_table, prompt_vocab_size = a.prompt_embedding_table, a.prompt_vocab_size
        t: dict[str, RuntimeTensor] = {}
        past = torch.full((batch_size * beam_width,), max_context_length + step, dtype=torch.int32)
        for name, x in (
            ("position_ids", position_ids),
            ("last_token_ids", last_token_ids),
            ("context_lengths", context_lengths.clone()),
            ("host_past_key_value_lengths", past),
            ("sequence_length", self.sequence_length_buffer),
            ("host_request_types", torch.ones_like(context_lengths).int()),
        ):
            t[name] = RuntimeTensor.from_torch(name, x)
        t["input_ids"] = RuntimeTensor.from_torch("input_ids", self.new_tokens, [batch_size * beam_width])
        if tasks is not None:
            t["tasks"] = RuntimeTensor.from_torch("tasks", tasks)
        self._common_bindings(t, prompt_embedding_table, prompt_vocab_size)
        return t

    # ------------------------------------------------------------------ the engine
    def _run(self, context: dict[str, RuntimeTensor]) -> None:
        from fasttts_cli.tools.fakes.trtllm_engine import run_engine

        self.engine_runs += 1
        run_engine(self, {name: rt.to_torch() for name, rt in context.items()})

    # ------------------------------------------------------------------ the decode loop
    def _setup_decoder(
        self, scfg: SamplingConfig, batch_size: int, input_ids: torch.Tensor, lens: torch.Tensor
    ):
        if scfg.top_k != 1 or scfg.num_beams != 1:
            raise NotImplementedError("the fake decoder is greedy with one beam (what the worker uses)")
        self.end_ids = torch.full((batch_size,), scfg.end_id, dtype=torch.int32)
        self.output_ids = torch.full((batch_size, 1, self.max_seq_length), scfg.end_id, dtype=torch.int32)
        for b, row in enumerate(torch.split(input_ids, [int(n) for n in lens])):
            self.output_ids[b, 0, : row.numel()] = row
        self.new_tokens = torch.zeros((batch_size, 1), dtype=torch.int32)
        self.finished = torch.zeros((batch_size, 1), dtype=torch.bool)
        hyps = scfg.use_beam_hyps  # the real session allocates 8 beam-hypothesis buffers, then copies them
        self.beam_hyps = (
            [torch.zeros((batch_size, 2, self.max_seq_length)) for _ in range(8)] if hyps else None
        )

    def finalize_decoder(
        self, context_lengths, batch_size, beam_width, scfg, in_progress=False
    ) -> torch.Tensor:
        beam_hyps_args = self.beam_hyps
        if scfg.use_beam_hyps and in_progress:
            beam_hyps_args = copy.deepcopy(beam_hyps_args)  # as the real one: gather_tree modifies them
            self.beam_hyps_copies += 1
        del beam_hyps_args
        return self.output_ids.clone()

    def handle_per_step(
        self,
        *,
        step: int,
        batch_size: int,
        max_context_length: int,
        beam_width: int,
        input_ids,
        scfg: SamplingConfig,
        prompt_embedding_table,
        tasks,
        context_lengths,
        host_context_lengths,
        prompt_vocab_size,
        logits_processor,
        **kwargs: Any,
    ):
        context = self.runtime.context_0 if step % 2 else self.runtime.context_1
        # the positional arguments after last_token_ids, as the real session passes them
        tail = (*(None,) * 8, prompt_embedding_table, tasks, prompt_vocab_size, None, None)

        def knobs(mi: dict[str, Any]) -> dict[str, Any]:
            return {
                "host_runtime_perf_knobs": mi.get("host_runtime_perf_knobs"),
                "host_context_progress": torch.tensor([0], dtype=torch.int64),
            }

        plugins = dict(batch_size=batch_size, context_lengths=context_lengths)
        plugins |= dict(use_gpt_attention_plugin=self.use_gpt_attention_plugin)
        plugins |= dict(remove_input_padding=self.remove_input_padding)
        if step == 0:
            mi = self._prepare_context_inputs(
                **plugins,
                host_context_lengths=host_context_lengths,
                max_context_length=max_context_length,
                input_ids=input_ids,
                pad_id=scfg.pad_id,
                eos_id=scfg.end_id,
            )
            ctx = self._get_context_shape_buffer(
                input_ids,
                context_lengths,
                host_context_lengths,
                mi.get("position_ids"),
                mi.get("last_token_ids"),
                *tail,
                **knobs(mi),
            )
            context = self.runtime.ctx_context
            self.runtime._set_tensors(context, ctx)
        self._run(context)  # 2. the engine writes into what is bound in `context`
        if step == 0:
            self.sequence_length_buffer = context_lengths.detach().clone()
        next_step_tensors = None
        if step != self.max_new_tokens - 1:  # 4. bind the next step (its logits: self.buffer['logits'])
            mi = self._prepare_generation_inputs(
                **plugins,
                step=step,
                num_beams=beam_width,
                attention_mask=None,
            )
            next_context = self.runtime.context_1 if step % 2 else self.runtime.context_0
            next_step_tensors = self._get_next_step_shape_buffer(
                batch_size,
                beam_width,
                max_context_length,
                step,
                context_lengths,
                host_context_lengths,
                mi.get("position_ids"),
                mi.get("last_token_ids"),
                *tail,
                **knobs(mi),
            )
            self.runtime._set_tensors(next_context, next_step_tensors)
        logits = self.buffer["logits"]  # 5.
        if logits_processor is not None:
            ids = self.finalize_decoder(context_lengths, batch_size, beam_width, scfg, in_progress=True)
            logits = logits_processor(step, ids.reshape(-1, ids.size(-1)), logits)
            self.buffer["logits"] = logits
        tokens = logits.reshape(batch_size, beam_width, -1).float().argmax(-1).int()  # 6. greedy decoder
        self.new_tokens.copy_(tokens)
        self.output_ids[:, :, max_context_length + step] = tokens
        self.sequence_length_buffer += (~self.finished[:, 0]).int()
        self.finished |= tokens == self.end_ids[:, None]
        should_stop = torch.tensor([bool(self.finished.all())])
        return (
            should_stop,
            next_step_tensors,
            tasks,
            context_lengths,
            host_context_lengths,
            None,
            None,
            None,
            None,
        )

    def decode(
        self,
        input_ids,
        context_lengths,
        sampling_config: SamplingConfig,
        prompt_embedding_table=None,
        tasks=None,
        prompt_vocab_size=None,
        logits_processor=None,
        **kwargs: Any,
    ):
        scfg, batch_size = sampling_config, int(context_lengths.size(0))
        max_context_length = int(context_lengths.max())
        assert batch_size == self.batch_size and max_context_length <= self.max_context_length
        assert scfg.num_beams == self.beam_width
        self._setup_decoder(scfg, batch_size, input_ids, context_lengths)
        per_step = dict(
            batch_size=batch_size, max_context_length=max_context_length, beam_width=scfg.num_beams
        )
        per_step |= dict(input_ids=input_ids, scfg=scfg, tasks=tasks, logits_processor=logits_processor)
        per_step |= dict(prompt_embedding_table=prompt_embedding_table, prompt_vocab_size=prompt_vocab_size)
        per_step |= dict(context_lengths=context_lengths, host_context_lengths=context_lengths.cpu())
        for step in range(self.max_new_tokens):
            should_stop, *_ = self.handle_per_step(step=step, **per_step)
            if should_stop.item():
                break
        return self.finalize_decoder(context_lengths, batch_size, scfg.num_beams, scfg)
