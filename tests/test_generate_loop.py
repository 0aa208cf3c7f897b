"""The one generate loop over every backend's GPT steps: same codes for the same seeds, beams and batch.

The four step backends (ONNX Runtime full-KV and in-place trunks, the torch decoder, the TensorRT-LLM
worker client on its numpy reference backend) run the same tiny checkpoint; `generate_loop.generate`
drives each with fresh per-line LineDecoders. A scripted GPT and a fake static-batch worker pin the row
bookkeeping itself (rows leaving, parents, the worker's finished rows).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fasttts_cli.backends.protocol import GPTSteps, StepOutput
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import generate_loop as loop
from fasttts_cli.indextts2.gpt_trtllm import LinePrompt, TrtllmGPT
from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams
from tests.tiny_trunks import tiny_trunks


@dataclass
class Backends:
    emb: dec.HostEmbeddings
    steps: dict[str, Any]  # name -> GPTSteps
    n_latents: int


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Backends:
    pytest.importorskip("torch")
    from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
    from fasttts_cli.indextts2.decode_torch import DecodeSettings, TorchGPT

    root = tmp_path_factory.mktemp("loop")
    t = tiny_trunks(root)
    ckpt, gcfg, uv, emb, full, inp = t.checkpoint, t.gpt_config, t.model, t.emb, t.classic, t.inplace
    state = tc.state_from_gpt_pth(ckpt / "gpt.pth")
    conv = tc.write_checkpoint(
        root / "trtllm",
        state,
        heads=int(gcfg["heads"]),
        n_conds=tc.n_conds_from_state(state),
        precision="fp32",
    )
    trt = TrtllmGPT(conv, backend="reference", emb=emb)
    tg = TorchGPT(copy.deepcopy(uv), settings=DecodeSettings(max_lines=4, max_beams=3))
    steps = {"onnx-full": full, "onnx-inplace": inp, "torch": tg, "trtllm-client": trt}
    yield Backends(emb, steps, t.n_latents)
    trt.close()


def _voices(b: Backends, text_lens: list[int], seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    d = b.emb.model_dim
    out = []
    for n in text_lens:
        lat = rng.normal(size=(b.n_latents, d)).astype(np.float32)
        emo = (0.3 * rng.normal(size=d)).astype(np.float32)
        out.append((lat, emo, rng.integers(2, b.emb.text_embedding.shape[0], size=n)))
    return out


def test_every_backend_implements_the_step_protocol(backends: Backends) -> None:
    for name, gpt in backends.steps.items():
        assert isinstance(gpt, GPTSteps), name
        assert gpt.vocab == backends.emb.mel_embedding.shape[0] and gpt.max_codes == backends.emb.max_codes


@pytest.mark.parametrize("beams", [1, 3])
def test_one_loop_gives_every_backend_the_same_codes(backends: Backends, beams: int) -> None:
    voices = _voices(backends, [4, 9, 2], seed=beams)
    params = [
        SamplingParams(beams=beams, max_tokens=14, top_k=20, temperature=1.0),
        SamplingParams(beams=beams, max_tokens=6),
        SamplingParams(beams=beams, max_tokens=10, do_sample=False, repetition_penalty=2.0),
    ]
    seeds = [31, 32, 33]
    got = {}
    for name, gpt in backends.steps.items():
        prompts = [gpt.prompt(*v) for v in voices]
        if name == "trtllm-client":
            assert all(isinstance(p, LinePrompt) for p in prompts)
        else:
            assert all(isinstance(p, np.ndarray) for p in prompts)
        decs = [LineDecoder(p, s, vocab=gpt.vocab) for p, s in zip(params, seeds, strict=True)]
        got[name] = loop.generate(gpt, prompts, decs)
        # a line alone gets the codes it gets in the batch
        (alone,) = loop.generate(gpt, prompts[1:2], [LineDecoder(params[1], seeds[1], vocab=gpt.vocab)])
        np.testing.assert_array_equal(alone.codes, got[name][1].codes, err_msg=name)
    want = got["onnx-full"]
    assert len({len(w.codes) for w in want}) > 1  # lines finish at different steps: rows leave
    for name, res in got.items():
        for w, g in zip(want, res, strict=True):
            np.testing.assert_array_equal(g.codes, w.codes, err_msg=name)
            assert g.stopped == w.stopped, name


def test_forced_is_the_same_path_on_every_backend(backends: Backends) -> None:
    (voice,) = _voices(backends, [5], seed=9)
    codes = np.array([3, 700, 12, 12, 8000])
    ref_l, ref_h = backends.steps["onnx-full"].forced(backends.steps["onnx-full"].prompt(*voice), codes)
    for name, gpt in backends.steps.items():
        logits, hidden = loop.forced(gpt, gpt.prompt(*voice), codes)
        assert logits.shape == (codes.size + 1, gpt.vocab), name
        np.testing.assert_allclose(logits, ref_l, rtol=0, atol=2e-4, err_msg=name)
        np.testing.assert_allclose(hidden, ref_h, rtol=0, atol=2e-5, err_msg=name)


# ------------------------------------------------------------------------------------ bookkeeping


class _ScriptedGPT:
    """A GPTSteps whose logits pick, for every row, the code script[last code fed] (+ the row's beam
    offset), recording every call, so the loop's row bookkeeping is visible."""

    vocab, max_codes = 8194, 50

    def __init__(self, script: dict[int, int]) -> None:
        self.script, self.calls, self.last = script, [], np.zeros(0, np.int64)

    def prompt(self, *a: Any) -> np.ndarray:
        return np.zeros((1, 1), np.float32)

    def _out(self) -> StepOutput:
        logits = np.full((self.last.size, self.vocab), -10.0, np.float32)
        for r, t in enumerate(self.last.tolist()):
            logits[r, self.script.get(t, 7)] = 10.0
        return StepOutput(logits, np.zeros((self.last.size, 2), np.float32))

    def prefill(self, prompts: Any, rows: Any, max_steps: int) -> StepOutput:
        self.calls.append(("prefill", list(rows), max_steps))
        self.last = np.full(int(sum(rows)), 8192, np.int64)
        return self._out()

    def step(self, parents: np.ndarray, tokens: np.ndarray) -> StepOutput:
        self.calls.append(("step", parents.tolist(), tokens.tolist()))
        self.last = np.asarray(tokens)
        return self._out()

    def end(self) -> None:
        self.calls.append(("end",))

    def latents(self, prompts: Any, codes: Any) -> list[np.ndarray]:
        return []


def test_loop_rows_leave_in_order_and_the_cache_ends() -> None:
    gpt = _ScriptedGPT({8192: 10, 10: 11, 11: 8193})
    assert isinstance(gpt, GPTSteps)
    p = [SamplingParams.greedy(6, 1.0), SamplingParams.greedy(1, 1.0), SamplingParams.greedy(6, 1.0)]
    res = loop.generate(gpt, [gpt.prompt()] * 3, [LineDecoder(q) for q in p])
    assert [r.codes.tolist() for r in res] == [[10, 11], [10], [10, 11]]
    assert gpt.calls == [
        ("prefill", [1, 1, 1], 6),
        ("step", [0, 2], [10, 10]),  # line 1 hit its max_tokens: its row left, line 2's row moved up
        ("step", [0, 1], [11, 11]),
        ("end",),
    ]


class _StaticWorker:
    """TensorRT-LLM's static batch as the worker serves it: every step names every row, a row's parent
    is in its own line; outputs are the tokens fed (column 0 of the logits) and the parent rows."""

    def __init__(self) -> None:
        self.proc = type("P", (), {"poll": staticmethod(lambda: None)})()
        self.requests: list[tuple[str, dict[str, np.ndarray]]] = []

    def request(self, op: str, arrays: dict[str, np.ndarray] | None = None, **fields: Any) -> dict:
        self.requests.append((op, {k: np.asarray(v).copy() for k, v in (arrays or {}).items()}))
        if op == "prefill":
            self.line_of = np.repeat(np.arange(arrays["rows"].size), arrays["rows"])
            n = self.line_of.size
            return {"logits": np.zeros((n, 4), np.float32), "hidden": np.zeros((n, 1), np.float32)}
        if op == "step":
            par, tok = arrays["parents"], arrays["tokens"]
            assert par.size == self.line_of.size and (self.line_of[par] == self.line_of).all()
            logits = np.zeros((par.size, 4), np.float32)
            logits[:, 0] = tok
            return {"logits": logits, "hidden": par[:, None].astype(np.float32)}
        return {}


def test_trtllm_client_keeps_finished_rows_in_the_static_batch() -> None:
    gpt = TrtllmGPT.__new__(TrtllmGPT)  # the client without a process: a fake static-batch worker
    worker = _StaticWorker()
    gpt.worker, gpt.emb, gpt._line_of, gpt._live = worker, None, None, np.zeros(0, np.int64)
    gpt.layout = type("L", (), {"stop_mel": 3})()
    gpt.prefill([LinePrompt(np.zeros((2, 1), np.float32), np.array([4]))] * 3, [2, 1, 2], max_steps=4)
    out = gpt.step(np.array([1, 1, 2, 4, 3]), np.array([5, 6, 7, 8, 9]))  # all rows: passed through
    np.testing.assert_array_equal(worker.requests[-1][1]["parents"], [1, 1, 2, 4, 3])
    # line 1 (row 2) finished: the loop asks for 4 rows; the worker still gets 5, row 2 fed the stop
    out = gpt.step(np.array([0, 0, 4, 3]), np.array([10, 11, 12, 13]))
    sent = worker.requests[-1][1]
    np.testing.assert_array_equal(sent["parents"], [0, 0, 2, 4, 3])
    np.testing.assert_array_equal(sent["tokens"], [10, 11, 3, 12, 13])
    np.testing.assert_array_equal(out.logits[:, 0], [10, 11, 12, 13])
    # then line 0 (rows 0-1 of the loop's 4) finishes: rows 2-3 of the loop are worker rows 3-4
    out = gpt.step(np.array([3, 2]), np.array([20, 21]))
    sent = worker.requests[-1][1]
    np.testing.assert_array_equal(sent["parents"], [0, 1, 2, 4, 3])
    np.testing.assert_array_equal(sent["tokens"], [3, 3, 3, 20, 21])
    np.testing.assert_array_equal(out.hidden[:, 0], [4, 3])
    gpt.end()
    assert worker.requests[-1][0] == "end" and gpt._line_of is None


def test_engine_decode_options_are_the_sampler_params(tmp_path: Path) -> None:
    """One type: the sampler's params are the preset's DecodeOptions plus the stop token, and one
    coercer checks preset files and request overrides alike."""
    from fasttts_cli.errors import InputError
    from fasttts_cli.indextts2.synthesizer import line_options
    from fasttts_cli.spec.presets import DecodeOptions, Preset, parse_preset

    assert issubclass(SamplingParams, DecodeOptions)
    opts = line_options(Preset(name="x"), {"num_beams": 2, "top_k": 7.0, "max_mel_tokens": 9})
    p = opts.sampling(stop_token=5, max_codes=8)
    assert (p.beams, p.top_k, p.max_tokens, p.stop_token) == (2, 7, 8, 5) and isinstance(p.top_k, int)
    for bad, why in (({"beams": 2.5}, "must be an integer"), ({"do_sample": 1}, "must be true or false")):
        with pytest.raises(ValueError, match=why):
            line_options(Preset(name="x"), bad)
        key, value = next(iter(bad.items()))
        f = tmp_path / f"{key}.toml"
        f.write_text(f"[decode]\n{key} = {str(value).lower()}\n", encoding="utf-8")
        with pytest.raises(InputError, match=f"decode.{key} {why}"):
            parse_preset(f)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        line_options(Preset(name="x"), {"temperature": 0})
    with pytest.raises(ValueError, match="beams must be >= 1"):
        SamplingParams(beams=0)
