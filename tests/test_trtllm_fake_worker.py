"""The worker's TensorRT-LLM backend (backends/tensorrt_llm/session.py) against the fake TensorRT-LLM
(tools/fakes/trtllm.py), whose GenerationSession keeps the real handle_per_step order: the engine built
from the tiny checkpoint by our trtllm-build flags, driven by the worker, gives the numpy reference's
logits, latents and codes. Each test pins one defect of issue 18 (1, 2, 5b, 6d) and would fail with it."""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.backends.tensorrt_llm import protocol as P
from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.backends.tensorrt_llm.names import ARCHITECTURE
from fasttts_cli.backends.tensorrt_llm.reference import ReferenceBackend
from fasttts_cli.backends.tensorrt_llm.session import TrtllmBackend, reorder_rows
from fasttts_cli.build.trtllm_build import engine_flags
from fasttts_cli.spec.presets import ComponentSpec, Limits
from fasttts_cli.tools.fakes.trtllm import fake_python, install
from tests.conftest_engine import *  # noqa: F403 (fixtures)

pytestmark = pytest.mark.gpu_fake
torch = pytest.importorskip("torch")


@dataclass
class Built:
    conv: Path  # converted checkpoint (the reference backend runs it)
    engine: Path  # the fake trtllm-build's output from it
    layout: tc.MergedLayout
    hidden: int


@pytest.fixture(scope="module")
def built(tiny_checkpoint_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    import yaml

    root = tmp_path_factory.mktemp("trtllm-fake")
    gcfg = yaml.safe_load((tiny_checkpoint_dir / "config.yaml").read_text(encoding="utf-8"))["gpt"]
    state = tc.state_from_gpt_pth(tiny_checkpoint_dir / "gpt.pth")
    n_conds = tc.n_conds_from_state(state)
    conv = tc.write_checkpoint(
        root / "conv", state, heads=int(gcfg["heads"]), n_conds=n_conds, precision="fp32"
    )
    layout = tc.layout_from_state(state, n_conds=n_conds)
    flags = engine_flags(layout, Limits(max_batch=2), ComponentSpec("tensorrt-llm", "fp32"))
    with install():
        tc.build_engine_cli(str(conv), str(root / "engine"), *flags)
    cfg = json.loads((conv / tc.CONFIG_FILE).read_text(encoding="utf-8"))
    return Built(conv, root / "engine", layout, int(cfg["hidden_size"]))


def _lines(b: Built, n_text: int = 6, seed: int = 0) -> P.Lines:
    rng = np.random.default_rng(seed)
    arrays = {
        "conds": (0.5 * rng.normal(size=(1, b.layout.n_conds, b.hidden))).astype(np.float32),
        "text_ids": rng.integers(2, 50, size=n_text),
        "text_lens": np.array([n_text]),
    }
    return P.parse_lines(arrays, b.layout, b.hidden)


def _forced_steps(backend: TrtllmBackend, lines: P.Lines, codes: list[int]) -> list[np.ndarray]:
    """Prefill + one step per code through the backend, as the worker serves them; the logits replied."""
    steps = [
        P.encode_frame({"op": "step"}, {"parents": np.zeros(1, np.int64), "tokens": np.array([c])})
        for c in codes
    ]
    out = io.BytesIO()
    backend.prefill(lines, np.array([1]), len(codes), P.Channel(io.BytesIO(b"".join(steps)), out))
    out.seek(0)
    replies = []
    while (frame := P.read_frame(out)) is not None:
        replies.append(frame[1]["logits"][0])
    return replies


def _reference_steps(b: Built, lines: P.Lines, codes: list[int]) -> list[np.ndarray]:
    ref, out = ReferenceBackend(b.conv), io.BytesIO()
    ref.prefill(lines, np.array([1]), len(codes), P.Channel(io.BytesIO(), out))
    out.seek(0)
    want = [P.read_frame(out)[1]["logits"][0]]  # type: ignore[index]
    for c in codes:
        want.append(ref.handle_step({"parents": np.zeros(1, np.int64), "tokens": np.array([c])})["logits"][0])
    return want


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.float64(a) - b) / np.linalg.norm(np.float64(b)))


# ------------------------------------------------------------------------------------------ defect 2


def test_fake_engine_from_dir_resolves_the_architecture_through_model_map(built: Built) -> None:
    with install() as trtllm:
        assert ARCHITECTURE not in trtllm.models.MODEL_MAP  # a fresh process knows the stock models only
        with pytest.raises(KeyError, match=ARCHITECTURE):
            trtllm.builder.Engine.from_dir(str(built.engine), rank=0)


def test_worker_starts_in_a_fresh_process_with_its_own_registration(built: Built) -> None:
    """Defect 2: only the build registered the architecture, so Engine.from_dir raised KeyError."""
    with install() as trtllm:
        backend = TrtllmBackend(built.engine)
        assert trtllm.models.MODEL_MAP[ARCHITECTURE].__name__ == ARCHITECTURE
        assert backend.layout == built.layout and backend.hidden_size == built.hidden


# ------------------------------------------------------------------------------------------ defect 1


def test_each_step_replies_the_engines_logits_for_that_step(built: Built) -> None:
    """Defect 1: a processor returning a new tensor made every step after the first reply the forced
    logits of the step before (the client then repeats its first code)."""
    lines, codes = _lines(built), [5, 77, 400, 12, 9]
    with install():
        got = _forced_steps(TrtllmBackend(built.engine), lines, codes)
    want = _reference_steps(built, lines, codes)
    assert len(got) == len(want) == len(codes) + 1
    for g, w in zip(got, want, strict=True):
        assert _rel(g, w) < 1e-5


def test_the_fake_catches_a_processor_that_returns_a_new_tensor(built: Built) -> None:
    """The old processor's behaviour (fill a copy, return it), run through the fake session: from step 1
    on the worker replies the previous step's forced logits, whose argmax is the code it forced."""
    lines, codes = _lines(built), [5, 77, 400]
    with install():
        backend = TrtllmBackend(built.engine)
        in_place = backend._on_step

        def returns_a_copy(step: int, ids: object, logits: torch.Tensor) -> torch.Tensor:
            snapshot = logits.clone()
            forced = in_place(step, ids, logits).clone()
            logits.copy_(snapshot)  # the bound buffer keeps the engine's logits; the copy is returned
            return forced

        backend._on_step = returns_a_copy  # type: ignore[method-assign]
        got = _forced_steps(backend, lines, codes)
    want = _reference_steps(built, lines, codes)
    assert _rel(got[0], want[0]) < 1e-5
    for k in range(1, len(codes) + 1):
        assert _rel(got[k], want[k]) > 0.5
        assert int(np.argmax(got[k])) == codes[k - 1]


# ------------------------------------------------------------------------------------------ defect 5b


def test_session_runs_without_beam_hypotheses(built: Built) -> None:
    """Defect 5b: with a logits processor, finalize_decoder deep-copied the beam hypotheses every step."""
    lines = _lines(built)
    with install() as trtllm:
        backend = TrtllmBackend(built.engine)
        used = []
        decode = backend.session.decode
        backend.session.decode = lambda *a, **k: used.append(a[2]) or decode(*a, **k)  # type: ignore[method-assign]
        _forced_steps(backend, lines, [3, 4, 5])
        assert [s.use_beam_hyps for s in used] == [False]
        assert backend.session.beam_hyps_copies == 0
        # what the default would cost: one deep copy per step
        scfg = trtllm.runtime.SamplingConfig(end_id=0, pad_id=0)
        assert scfg.use_beam_hyps is True
        used[0].use_beam_hyps = True
        backend.session.decode = decode  # type: ignore[method-assign]
        backend.SamplingConfig = lambda **k: used[0]  # type: ignore[assignment]
        _forced_steps(backend, lines, [3, 4, 5])
        assert backend.session.beam_hyps_copies == 4


def test_a_parent_change_copies_only_the_moved_rows_filled_prefix() -> None:
    cache = torch.arange(4 * 2 * 1 * 6 * 2, dtype=torch.float32).reshape(4, 2, 1, 6, 2)
    before = cache.clone()
    assert reorder_rows([cache], np.array([0, 0, 2, 2]), length=4) == 2  # rows 1 and 3 move
    assert torch.equal(cache[[0, 2]], before[[0, 2]])
    assert torch.equal(cache[1, :, :, :4], before[0, :, :, :4]) and torch.equal(
        cache[3, :, :, :4], before[2, :, :, :4]
    )
    assert torch.equal(cache[[1, 3], :, :, 4:], before[[1, 3], :, :, 4:])  # past the filled prefix: untouched
    assert reorder_rows([cache], np.arange(4), length=6) == 0


# ------------------------------------------------------------------------------------------ defect 6d


def test_trtllm_build_gets_kv_cache_type_continuous(built: Built) -> None:
    flags = engine_flags(built.layout, Limits(max_batch=2), ComponentSpec("tensorrt-llm", "fp32"))
    opt = dict(zip(flags[::2], flags[1::2], strict=True))
    assert opt["--kv_cache_type"] == "continuous" and "--paged_kv_cache" not in opt
    build = json.loads((built.engine / "config.json").read_text(encoding="utf-8"))["build_config"]
    assert build["kv_cache_type"] == "continuous" and build["plugin_config"]["paged_kv_cache"] is False
    with install(), pytest.raises(SystemExit):  # the build command refuses a value it does not know
        tc.build_engine_cli(str(built.conv), str(built.engine.parent / "bad"), "--kv_cache_type", "linear")


# ------------------------------------------------------------------------------------------ end to end


def test_client_codes_through_the_worker_subprocess_equal_the_reference(built: Built, tmp_path: Path) -> None:
    """The client (indextts2/gpt_trtllm.py) launching the worker in the fake TensorRT-LLM environment:
    greedy and sampled 3-beam codes of two ragged lines equal the reference backend's."""
    from fasttts_cli.indextts2.gpt_trtllm import LinePrompt, TrtllmGPT
    from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams

    rng = np.random.default_rng(3)
    prompts = [
        LinePrompt(
            (0.5 * rng.normal(size=(built.layout.n_conds, built.hidden))).astype(np.float32),
            rng.integers(2, 50, size=n),
        )
        for n in (7, 3)
    ]
    py = str(fake_python(tmp_path))
    with (
        TrtllmGPT(built.engine, backend="trtllm", python=py) as gpu,
        TrtllmGPT(built.conv, backend="reference") as ref,
    ):
        assert gpu.info.backend == "trtllm"
        for params in (
            [SamplingParams.greedy(max_tokens=m) for m in (8, 3)],
            [SamplingParams(max_tokens=6)] * 2,
        ):
            got = gpu.generate(prompts, [LineDecoder(p, 11 + i) for i, p in enumerate(params)])
            want = ref.generate(prompts, [LineDecoder(p, 11 + i) for i, p in enumerate(params)])
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g.codes, w.codes)
                assert len(set(g.codes.tolist())) > 1  # not one repeated code


def test_acceptance_program_sim_cpu(tiny_checkpoint_dir: Path, tmp_path: Path) -> None:
    from fasttts_cli.tools.accept_trtllm import main

    shutil.copytree(tiny_checkpoint_dir, tmp_path / "work" / "ckpt")
    assert main(["--sim-cpu", "--work", str(tmp_path / "work"), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "accept_trtllm.json").read_text(encoding="utf-8"))
    assert report["ok"] and {c["mode"] for c in report["checks"]} == {"sim"} and len(report["checks"]) == 7
