"""The TensorRT-LLM GPT runtime (worker process + client), on the CPU through the worker's numpy `reference`
backend, run as a real subprocess on the tiny checkpoint converted by trtllm_convert: its greedy, sampled
and beam codes and its latents equal those of our ONNX trunk (`GPTDecoder`) on the same weights; the
framing and the error paths are clean. The `trtllm` backend itself needs a GPU (last test)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.backends.tensorrt_llm import trtllm_worker as tw
from fasttts_cli.errors import EngineMismatchError, MissingDependencyError, SynthesisError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2.gpt_trtllm import LinePrompt, TrtllmGPT, WorkerClient, worker_python
from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams

TOL = 1e-4


def rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-30))


# ------------------------------------------------------------------------------------------ framing


def test_frame_roundtrip_and_errors() -> None:
    arrays = {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": np.ones((0, 4), np.float32)}
    first = tw.encode_frame({"op": "x", "n": 3}, arrays)
    data = first + tw.encode_frame({"op": "y"})
    s = io.BytesIO(data)
    h, a = tw.read_frame(s)  # type: ignore[misc]
    assert h == {"op": "x", "n": 3} and a.keys() == arrays.keys()
    np.testing.assert_array_equal(a["a"], arrays["a"])
    assert a["b"].shape == (0, 4) and a["b"].dtype == np.float32
    assert tw.read_frame(s) == ({"op": "y"}, {})
    assert tw.read_frame(s) is None  # clean end between frames
    with pytest.raises(tw.FrameError, match="magic"):
        tw.read_frame(io.BytesIO(b"oops" + data))
    with pytest.raises(tw.FrameError, match="ended inside a frame"):
        tw.read_frame(io.BytesIO(first[:-5]))
    bad = tw._HEAD.pack(tw.MAGIC, 5) + b"{nope"
    with pytest.raises(tw.FrameError, match="not JSON"):
        tw.read_frame(io.BytesIO(bad))


# ------------------------------------------------------------------------------------------ fixtures


@dataclass
class Setup:
    onnx: dec.GPTDecoder  # our ONNX trunk on the tiny checkpoint
    gpt: TrtllmGPT  # the worker (reference backend) on the same weights, converted
    state: dict[str, np.ndarray]
    conv: Path
    n_latents: int


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    torch = pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml")
    from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions
    from fasttts_cli.build.export import export_graph, gpt_host_tables, trunk_spec
    from fasttts_cli.build.tiny import TINY, write_tiny_checkpoint
    from fasttts_cli.nets.unified_voice import load_unified_voice

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("trtllm-runtime")
    # stop_bias 0: lines run to their max_tokens unless a stop is drawn, so lengths are long enough
    ckpt = write_tiny_checkpoint(root / "ckpt", stop_bias=0.0)
    gcfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))["gpt"]
    uv = load_unified_voice(ckpt / "gpt.pth", gcfg, cond_input_size=TINY.w2v_width)
    trunk = root / "trunk"
    trunk.mkdir()
    path = export_graph(trunk_spec(uv), trunk)
    for name, arr in gpt_host_tables(uv).items():
        np.save(trunk / name, arr)
    c = uv.cfg
    tokens = dec.GPTTokens(c.start_text_token, c.stop_text_token, c.start_mel_token, c.stop_mel_token)
    onnx = dec.GPTDecoder(
        OrtSession(path, SessionOptions(threads=1)),
        dec.HostEmbeddings.load(trunk, tokens),
        layers=c.layers,
        heads=c.heads,
    )
    state = tc.state_from_gpt_pth(ckpt / "gpt.pth")
    conv = tc.write_checkpoint(
        root / "gpt-trtllm-ckpt",
        state,
        heads=int(gcfg["heads"]),
        n_conds=tc.n_conds_from_state(state),
        precision="fp32",
    )
    gpt = TrtllmGPT(conv, backend="reference")
    yield Setup(onnx, gpt, state, conv, c.spk_perceiver.num_latents)
    gpt.close()


def _lines(s: Setup, text_lens: list[int], seed: int = 0) -> tuple[list[np.ndarray], list[LinePrompt]]:
    """The same lines twice: prefix embeddings for GPTDecoder, prompts for the worker."""
    rng = np.random.default_rng(seed)
    emb = s.onnx.emb
    prefixes, prompts = [], []
    for n in text_lens:
        lat = rng.normal(size=(s.n_latents, emb.model_dim)).astype(np.float32)
        emo = (0.3 * rng.normal(size=emb.model_dim)).astype(np.float32)
        text = rng.integers(2, emb.text_embedding.shape[0], size=n)
        prefixes.append(emb.prefix(lat, emo, text))
        prompts.append(LinePrompt.from_voice(lat, emo, emb.speed, text))
    return prefixes, prompts


# ------------------------------------------------------------------------------------------ equivalence


def test_worker_reports_the_converted_layout(setup: Setup) -> None:
    info = setup.gpt.info
    assert info.backend == "reference" and info.hidden_size == setup.onnx.emb.model_dim
    assert info.layout == tc.layout_from_state(setup.state, n_conds=tc.n_conds_from_state(setup.state))
    assert info.max_codes == setup.onnx.emb.max_codes


def test_forced_logits_and_hidden_equal_onnx(setup: Setup) -> None:
    """Teacher-forced generation path (start at mel 0, code k at k + 2) through the KV cache."""
    (prefix,), (prompt,) = _lines(setup, [9])
    codes = np.array([5, 77, 4000, 5, 8000, 12])
    want_logits, want_hidden = setup.onnx.forced(prefix, codes)
    logits, hidden = setup.gpt.forced(prompt, codes)
    assert logits.shape == want_logits.shape and hidden.shape == want_hidden.shape
    assert rel(logits, want_logits) < TOL and rel(hidden, want_hidden) < TOL
    np.testing.assert_array_equal(logits.argmax(-1), want_logits.argmax(-1))
    # KV cache vs full recompute of trtllm_convert's executable definition on the merged inputs
    w = tc.read_safetensors(setup.conv / tc.WEIGHTS_FILE)
    cfg = json.loads((setup.conv / tc.CONFIG_FILE).read_text(encoding="utf-8"))
    lay = setup.gpt.layout
    ids, pos = lay.generation_inputs(prompt.text_ids, codes)
    emb = tc.emulate_inputs(
        ids,
        prompt.conds,
        pos,
        w["transformer.vocab_embedding.weight"],
        w["transformer.position_embedding.weight"],
    )
    full_hidden, full_logits = tc.reference_forward(w, cfg, emb)
    p = ids.size - codes.size - 1
    assert rel(logits, full_logits[p:, : lay.n_mel]) < 1e-6 and rel(hidden, full_hidden[p:]) < 1e-6


def test_latents_equal_onnx(setup: Setup) -> None:
    prefixes, prompts = _lines(setup, [4, 11, 7], seed=1)
    rng = np.random.default_rng(2)
    codes = [rng.integers(0, 8192, size=n) for n in (6, 1, 13)]
    want = setup.onnx.latents(prefixes, codes)
    got = setup.gpt.latents(prompts, codes)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want, strict=True):
        assert rel(g, w) < TOL


def test_greedy_codes_equal_onnx_with_ragged_lines(setup: Setup) -> None:
    """Different text lengths and max_tokens: a finished line's rows stay in the worker's batch."""
    prefixes, prompts = _lines(setup, [3, 12, 7], seed=3)
    params = [SamplingParams.greedy(max_tokens=m) for m in (4, 15, 9)]
    want = setup.onnx.generate(prefixes, [LineDecoder(p) for p in params])
    got = setup.gpt.generate(prompts, [LineDecoder(p) for p in params])
    for g, w, p in zip(got, want, params, strict=True):
        np.testing.assert_array_equal(g.codes, w.codes)
        assert g.stopped == w.stopped and (g.stopped or g.codes.size == p.max_tokens)


def test_sampled_codes_with_per_line_seeds_equal_onnx(setup: Setup) -> None:
    prefixes, prompts = _lines(setup, [5, 9], seed=4)
    params = SamplingParams(beams=1, max_tokens=14)
    want = setup.onnx.generate_codes(prefixes, params, [11, 12])
    got = setup.gpt.generate_codes(prompts, params, [11, 12])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.codes, w.codes)
    # a line's codes do not depend on its batch-mates
    (alone,) = setup.gpt.generate_codes(prompts[1:], params, [12])
    np.testing.assert_array_equal(alone.codes, got[1].codes)


def test_three_beams_equal_onnx(setup: Setup) -> None:
    """The original's beam sampling (3 beams): rows reorder by parent inside each line."""
    prefixes, prompts = _lines(setup, [6, 4], seed=5)
    params = SamplingParams(max_tokens=10)  # beams 3, sampling
    assert params.beams == 3
    want = setup.onnx.generate_codes(prefixes, params, [21, 22])
    got = setup.gpt.generate_codes(prompts, params, [21, 22])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.codes, w.codes)
        assert g.score == pytest.approx(w.score, rel=1e-5, abs=1e-5)
    (alone,) = setup.gpt.generate_codes(prompts[:1], params, [21])
    np.testing.assert_array_equal(alone.codes, got[0].codes)


def test_step_interface_rows_and_parents(setup: Setup) -> None:
    """Two rows of one line: after a reorder both continue from row 1, so they are identical."""
    _, (prompt,) = _lines(setup, [5], seed=6)
    gpt = setup.gpt
    out = gpt.prefill([prompt], [2], max_steps=3)
    np.testing.assert_array_equal(out.logits[0], out.logits[1])
    out = gpt.step(np.array([0, 1]), np.array([10, 20]))
    assert not np.allclose(out.logits[0], out.logits[1])
    out2 = gpt.step(np.array([1, 1]), np.array([30, 30]))
    np.testing.assert_array_equal(out2.logits[0], out2.logits[1])
    gpt.end()
    ref, _ = gpt.forced(prompt, np.array([20, 30]))
    assert rel(out2.logits[0], ref[2]) < 1e-6


# ------------------------------------------------------------------------------------------ errors


def test_protocol_errors_are_clean_and_the_worker_survives(setup: Setup) -> None:
    gpt = setup.gpt
    gpt.end()
    with pytest.raises(SynthesisError, match="step without a prefill"):
        gpt.step(np.array([0]), np.array([1]))
    _, prompts = _lines(setup, [3, 3], seed=7)
    gpt.prefill(prompts, [2, 1], max_steps=2)
    with pytest.raises(SynthesisError, match="its own line"):
        gpt.step(np.array([2, 0, 2]), np.array([1, 1, 1]))
    with pytest.raises(SynthesisError, match="outside the mel codes"):
        gpt.step(np.array([0, 1, 2]), np.array([1, 1, 9000]))
    with pytest.raises(SynthesisError, match="3 rows"):
        gpt.step(np.array([0]), np.array([1]))
    gpt.step(np.array([0, 0, 2]), np.array([1, 2, 3]))
    gpt.step(np.array([0, 1, 2]), np.array([1, 2, 3]))
    with pytest.raises(SynthesisError, match="exceeds this generation's 2 steps"):
        gpt.step(np.array([0, 1, 2]), np.array([1, 2, 3]))
    with pytest.raises(SynthesisError, match="unknown op"):
        gpt.worker.request("dance")
    with pytest.raises(SynthesisError, match="conds"):
        gpt.worker.request(
            "latent",
            {
                "conds": np.zeros((1, 3, 4), np.float32),
                "text_ids": np.zeros(1, np.int64),
                "text_lens": np.ones(1, np.int64),
                "codes": np.zeros(1, np.int64),
                "code_lens": np.ones(1, np.int64),
            },
        )
    with pytest.raises(ValueError, match="mel positions"):
        gpt.generate(prompts[:1], [LineDecoder(SamplingParams.greedy(max_tokens=10_000))])
    # still serving after all that
    _, h = gpt.forced(prompts[0], np.array([4]))
    assert h.shape == (2, gpt.info.hidden_size) and np.isfinite(h).all()


def _raw_line(s: Setup, text: np.ndarray, codes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    lay, d = s.gpt.layout, s.gpt.info.hidden_size
    out = {
        "conds": np.zeros((1, lay.n_conds, d), np.float32),
        "text_ids": np.asarray(text, np.int64),
        "text_lens": np.array([len(text)], np.int64),
        "rows": np.ones(1, np.int64),
    }
    if codes is not None:
        out |= {"codes": np.asarray(codes, np.int64), "code_lens": np.array([len(codes)], np.int64)}
    return out


@pytest.mark.parametrize(
    ("op", "change", "fields", "message"),
    [
        ("prefill", {"rows": None}, {"max_steps": 1}, "missing array 'rows'"),
        ("prefill", {"text_lens": np.array([5])}, {"max_steps": 1}, "do not add up"),
        ("prefill", {"text_ids": np.array([2, 9999])}, {"max_steps": 1}, "text ids outside"),
        ("prefill", {"rows": np.zeros(1, np.int64)}, {"max_steps": 1}, "one count >= 1 per line"),
        ("prefill", {}, {"max_steps": 10_000}, "max_steps 10000"),
        (
            "prefill",
            {"text_ids": np.full(170, 5), "text_lens": np.array([170])},
            {"max_steps": 1},
            "text positions",
        ),
        ("prefill", {"text_ids": np.array([2.0, 3.0])}, {"max_steps": 1}, "expected 1-D of kind 'iu'"),
        ("latent", {"codes": np.array([1, 9000])}, {}, "codes outside"),
        (
            "latent",
            {"codes": np.zeros(402, np.int64), "code_lens": np.array([402])},
            {},
            "exceed the 403 mel",
        ),
        ("latent", {"code_lens": np.array([1, 1])}, {}, "2 code lengths for 1 lines"),
        ("latent", {"code_lens": np.array([5])}, {}, "code lengths \\[5\\] do not add up"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(
    setup: Setup, op: str, change: dict, fields: dict, message: str
) -> None:
    arrays = _raw_line(setup, np.array([2, 3]), np.array([1, 2]) if op == "latent" else None)
    for k, v in change.items():
        if v is None:
            del arrays[k]
        else:
            arrays[k] = v
    with pytest.raises(SynthesisError, match=message):
        setup.gpt.worker.request(op, arrays, **fields)
    assert setup.gpt.worker.proc.poll() is None  # still serving


def test_bad_engine_folder_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(EngineMismatchError, match="no such engine folder"):
        TrtllmGPT(tmp_path / "absent", backend="reference")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / tc.CONFIG_FILE).write_text("{}")
    (tmp_path / "x" / tc.WEIGHTS_FILE).write_bytes(b"\0" * 8)
    with pytest.raises(EngineMismatchError, match="cannot read the checkpoint"):
        TrtllmGPT(tmp_path / "x", backend="reference")
    tc.write_safetensors(tmp_path / "x" / tc.WEIGHTS_FILE, {"a": np.zeros(2, np.float32)})
    with pytest.raises(EngineMismatchError, match="no 'indextts2' section"):
        TrtllmGPT(tmp_path / "x", backend="reference")


def test_missing_trtllm_python_is_a_clean_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FASTTTS_TRTLLM_PYTHON", raising=False)
    with pytest.raises(MissingDependencyError, match="FASTTTS_TRTLLM_PYTHON"):
        TrtllmGPT(tmp_path, backend="trtllm")
    assert worker_python("reference") == sys.executable
    with pytest.raises(MissingDependencyError, match="cannot start the GPT worker"):
        TrtllmGPT(tmp_path, backend="trtllm", python=str(tmp_path / "no-python"))


def test_dead_worker_reports_its_stderr(tmp_path: Path, setup: Setup) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ImportError: no module named tensorrt_llm' >&2\nexit 7\n")
    fake.chmod(0o755)
    with pytest.raises(SynthesisError) as e:
        TrtllmGPT(tmp_path, backend="trtllm", python=str(fake))
    msg = str(e.value)
    assert "exited with code 7 during start" in msg and "no module named tensorrt_llm" in msg
    # something that is not a worker answers on stdout
    chatty = tmp_path / "chatty"
    chatty.write_text("#!/bin/sh\necho 'TensorRT-LLM version 1.2.1 banner'\nexit 0\n")
    chatty.chmod(0o755)
    with pytest.raises(SynthesisError, match="during start \\(bad frame: bad frame magic"):
        TrtllmGPT(tmp_path, backend="trtllm", python=str(chatty))
    # a worker that dies mid-generation
    w = WorkerClient(setup.conv, backend="reference")
    w.proc.kill()
    with pytest.raises(SynthesisError, match="exited with code -9 during step"):
        w.request("step", {"parents": np.zeros(1, np.int64), "tokens": np.zeros(1, np.int64)})
    w.close()


def test_worker_runs_as_a_script_and_rejects_a_garbled_stream(setup: Setup) -> None:
    script = Path(tw.__file__)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, str(script), str(setup.conv)],
        input=b"hello, worker",
        capture_output=True,
        env=env,
        cwd="/",
        timeout=60,
    )
    s = io.BytesIO(r.stdout)
    ready, _ = tw.read_frame(s)  # type: ignore[misc]
    assert ready["ok"] and ready["op"] == "ready" and ready["backend"] == "reference"
    err, _ = tw.read_frame(s)  # type: ignore[misc]
    assert not err["ok"] and err["kind"] == "protocol" and "magic" in err["error"]
    assert r.returncode == 2 and tw.read_frame(s) is None  # nothing else on stdout


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_trtllm_backend_matches_reference() -> None:  # pragma: no cover - needs tensorrt_llm on a GPU
    """Needs $FASTTTS_TRTLLM_PYTHON and an engine built from a converted tiny checkpoint:
    FASTTTS_TEST_TRTLLM_ENGINE (engine folder) and FASTTTS_TEST_TRTLLM_CKPT (its checkpoint folder)."""
    engine, ckpt = os.environ.get("FASTTTS_TEST_TRTLLM_ENGINE"), os.environ.get("FASTTTS_TEST_TRTLLM_CKPT")
    if not (engine and ckpt and os.environ.get("FASTTTS_TRTLLM_PYTHON")):
        pytest.skip("set FASTTTS_TRTLLM_PYTHON, FASTTTS_TEST_TRTLLM_ENGINE and FASTTTS_TEST_TRTLLM_CKPT")
    with TrtllmGPT(engine, backend="trtllm") as gpu, TrtllmGPT(ckpt, backend="reference") as ref:
        lay, d = ref.layout, ref.info.hidden_size
        rng = np.random.default_rng(0)
        prompt = LinePrompt(
            (0.5 * rng.normal(size=(lay.n_conds, d))).astype(np.float32), rng.integers(2, 50, size=8)
        )
        codes = rng.integers(0, 8192, size=16)
        want, _ = ref.forced(prompt, codes)
        got, _ = gpu.forced(prompt, codes)
        assert rel(got, want) < 3e-2  # fp16 engine
        (lat_ref,), (lat_gpu,) = ref.latents([prompt], [codes]), gpu.latents([prompt], [codes])
        assert rel(lat_gpu, lat_ref) < 3e-2
