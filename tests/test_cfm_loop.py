"""The one Euler CFM loop (cfm.loop.euler): the same arithmetic on numpy and torch, the original's
loop value for value, every backend's CFM running through it, and s2mel_cache never importing the model's
engine side (the dependency points one way)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fasttts_cli.cfm import loop as core  # noqa: E402
from fasttts_cli.cfm.schedules import euler_times  # noqa: E402
from fasttts_cli.indextts2 import cfm as cfm_stage  # noqa: E402
from fasttts_cli.indextts2.engine import CFMInputs  # noqa: E402

PACKAGE = Path(__file__).resolve().parent.parent / "fasttts_cli"


def _inputs(seed: int = 0, b: int = 3, t: int = 40, c: int = 32, style: int = 192):
    rng = np.random.default_rng(seed)
    x_lens = np.array([t, t - 7, t - 19], np.int64)[:b]
    p_lens = np.array([11, 5, 9], np.int64)[:b]
    mu = rng.standard_normal((b, t, c)).astype(np.float32)
    prompt = rng.standard_normal((b, 80, 13)).astype(np.float32)
    sty = rng.standard_normal((b, style)).astype(np.float32)
    z = rng.standard_normal((b, 80, t)).astype(np.float32)
    return mu, x_lens, prompt, p_lens, sty, z


def _toy_velocity(x, t, prompt_x):
    # depends on x, t and the prompt, nonlinear: enough to tell any change in the loop's arithmetic
    return 0.3 * x * x - 1.7 * x + 0.01 * prompt_x + float(t)


def test_masks_and_euler_agree_on_numpy_and_torch() -> None:
    mu, x_lens, prompt, p_lens, style, z = _inputs()
    times = euler_times(7)
    run_n, x_n = core.prepare(mu, x_lens, prompt, p_lens, style, z, times)
    tt = [torch.from_numpy(a) for a in (mu, x_lens, prompt, p_lens, style, z)]
    run_t, x_t = core.prepare(*tt, times)
    assert np.array_equal(run_n.keep, run_t.keep.numpy())
    assert np.array_equal(run_n.prompt_x, run_t.prompt_x.numpy())
    # the prompt region holds the ref mel, the generated region is z, padding is zero
    assert np.array_equal(run_n.prompt_x[1, :, :5], prompt[1, :, :5]) and not run_n.prompt_x[1, :, 5:].any()
    assert np.array_equal(x_n[1, :, 5:33], z[1, :, 5:33]) and not x_n[1, :, 33:].any()
    out_n = core.euler(lambda s, x, t: _toy_velocity(x, t, run_n.prompt_x), x_n, run_n.keep, times)
    out_t = core.euler(lambda s, x, t: _toy_velocity(x, t, run_t.prompt_x), x_t, run_t.keep, times)
    assert out_n.dtype == np.float32 and out_t.dtype == torch.float32
    assert np.array_equal(out_n, out_t.numpy())
    assert not out_n[:, :, :5].any()  # the prompt region stays zero


@pytest.mark.parametrize("steps", [1, 4, 25])
def test_euler_is_the_original_loop_value_for_value(steps: int) -> None:
    """The loop the original (and this project's four copies before) ran: torch.linspace grid, dt a
    0-d float32 tensor, t accumulated, x <- (x + dt v) * keep."""
    mu, x_lens, prompt, p_lens, style, z = _inputs(1)
    run, x0 = core.prepare(
        *(torch.from_numpy(a) for a in (mu, x_lens, prompt, p_lens, style, z)), euler_times(steps)
    )
    t_span = torch.linspace(0, 1, steps + 1)
    x, t = x0, t_span[0]
    for k in range(1, steps + 1):
        dt = t_span[k] - t_span[k - 1]
        x = (x + dt * _toy_velocity(x, t, run.prompt_x)) * run.keep
        t = t + dt
    got = core.euler(lambda s, xx, tt: _toy_velocity(xx, tt, run.prompt_x), x0, run.keep, run.times)
    assert torch.equal(got, x)


class _FakeDitStep:
    """The `dit_cfg_step` session's contract (`run(names, feeds) -> {name: array}`), v from the feeds."""

    def __init__(self) -> None:
        self.ts: list[np.ndarray] = []

    def run(self, names, feeds):
        assert names == ["v"] and feeds["cfg_rate"].dtype == np.float32 and feeds["t"].dtype == np.float32
        self.ts.append(feeds["t"].copy())
        return {"v": _toy_velocity(feeds["x"], feeds["t"][0], feeds["prompt_x"]).astype(np.float32)}


def test_engine_stage_is_the_original_numpy_loop() -> None:
    mu, x_lens, prompt, p_lens, style, z = _inputs(2)
    sess = _FakeDitStep()
    inp = CFMInputs(mu, x_lens, prompt, p_lens, style)
    got = cfm_stage.solve(lambda run: cfm_stage.session_velocity(sess, run), inp, z, 6, 0.7)
    # the engine's loop before it ran the one loop
    t_len = z.shape[2]
    pos = np.arange(t_len)[None, :]
    in_prompt = (pos < p_lens[:, None]).astype(np.float32)[:, None, :]
    keep = ((pos >= p_lens[:, None]) & (pos < x_lens[:, None])).astype(np.float32)[:, None, :]
    prompt_x = np.pad(prompt, ((0, 0), (0, 0), (0, t_len - prompt.shape[2]))) * in_prompt
    x, ts, t = z * keep, euler_times(6), np.float32(0.0)
    for s in range(1, 7):
        dt = np.float32(ts[s] - ts[s - 1])
        x = ((x + dt * _toy_velocity(x, t, prompt_x)) * keep).astype(np.float32)
        t = np.float32(t + dt)
    assert np.array_equal(got, x)
    assert [float(a[0]) for a in sess.ts] == pytest.approx(list(euler_times(6)[:-1]), abs=1e-7)


def test_every_backend_runs_the_one_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttts_cli.backends.torch.s2mel import TorchS2Mel
    from fasttts_cli.indextts2.s2mel_cache import piecewise_torch as pt
    from fasttts_cli.nets.random_modules import random_s2mel

    calls: list[int] = []
    real = core.euler

    def counting(velocity, x, keep, times, start=0, stop=None):
        calls.append(len(times) - 1)
        return real(velocity, x, keep, times, start, stop)

    monkeypatch.setattr(core, "euler", counting)
    torch.set_num_threads(1)
    s2mel = random_s2mel("tiny", 1)
    args = [torch.from_numpy(a) for a in _inputs(3)]
    ref, _ = s2mel.cfm.solve(*args, n_steps=3)  # build.s2mel: the reference
    pieces = pt.solve(s2mel.cfm.estimator, *args, 3)  # the s2mel cache at T0
    dev = TorchS2Mel(copy.deepcopy(s2mel)).cfm(*args, steps=3)  # the torch backend
    sess = _FakeDitStep()  # the engine's stage
    cfm_stage.solve(
        lambda run: cfm_stage.session_velocity(sess, run), CFMInputs(*_inputs(3)[:5]), _inputs(3)[5], 3
    )
    assert calls == [3, 3, 3, 3]
    torch.testing.assert_close(pieces, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(dev, ref, rtol=0, atol=1e-5)


def test_s2mel_cache_never_imports_the_engine_side() -> None:
    """s2mel_cache is the model's CFM machinery: indextts2 may import it, never the other way (also not
    inside functions), so the two packages form no cycle."""
    offenders = []
    for path in sorted((PACKAGE / "s2mel_cache").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("fasttts_cli.indextts2")]
    assert offenders == []
