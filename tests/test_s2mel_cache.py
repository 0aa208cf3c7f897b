"""s2mel cache (issue 5): piecewise DiT == single graph, TS/BS by their definitions, ORT pieces, policies,
calibration determinism, schedules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fasttts_cli.cfm.loop import PolicyError  # noqa: E402
from fasttts_cli.cfm.schedules import euler_times, step_times, sway_grid  # noqa: E402
from fasttts_cli.errors import EngineMismatchError, UsageError  # noqa: E402
from fasttts_cli.indextts2.s2mel_cache import piecewise_torch as pt  # noqa: E402
from fasttts_cli.indextts2.s2mel_cache.calibrate import calibrate_modules, relative_mae  # noqa: E402
from fasttts_cli.indextts2.s2mel_cache.policy import (  # noqa: E402
    POLICY_FILE,
    Policy,
    PolicySet,
    engine_identity,
    load_policy,
    write_policy_set,
)
from fasttts_cli.nets.random_model import dit_config, random_dit  # noqa: E402
from fasttts_cli.nets.s2mel import CFM  # noqa: E402
from fasttts_cli.spec.engine_folder import (  # noqa: E402
    ComponentEntry,
    Manifest,
    read_manifest,
    write_manifest,
)

DEPTH, STEPS = 5, 6


@pytest.fixture(scope="module")
def dit():
    torch.set_num_threads(1)
    return random_dit(
        dit_config(hidden=32, depth=DEPTH, heads=2, content_dim=24, style_dim=16, wavenet_layers=2)
    )


def _inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Two rows with different prompt and total lengths (padding exercised)."""
    g = torch.Generator().manual_seed(seed)
    b, t = 2, 30
    mu = torch.randn(b, t, 24, generator=g)
    x_lens = torch.tensor([30, 28])
    prompt = torch.randn(b, 80, 11, generator=g)
    prompt_lens = torch.tensor([11, 8])
    style = torch.randn(b, 16, generator=g)
    z = torch.randn(b, 80, t, generator=g)
    return mu, x_lens, prompt, prompt_lens, style, z


def _uniform(letter: str, head: str = "C") -> Policy:
    row = "C" + letter * (STEPS - 1)
    return Policy("T3", 0.01, (row,) * DEPTH, (row,) * DEPTH, "C" + head * (STEPS - 1))


# -------------------------------------------------------------------------------- T0 == single graph


def test_t0_piecewise_equals_single_graph_cfm(dit) -> None:
    mu, x_lens, prompt, prompt_lens, style, z = _inputs()
    want, _ = CFM(dit).solve(mu, x_lens, prompt, prompt_lens, style, z.clone(), n_steps=STEPS)
    got = pt.solve(dit, mu, x_lens, prompt, prompt_lens, style, z.clone(), STEPS)
    assert float((got - want).abs().max()) <= 1e-5
    # caching "off" through an explicit all-compute table is the same run
    full = pt.solve(
        dit, mu, x_lens, prompt, prompt_lens, style, z.clone(), STEPS, plan=Policy.full(DEPTH, STEPS)
    )
    assert torch.equal(full, got)
    assert float(got.abs().max()) > 0.1  # a real trajectory, not zeros


@pytest.mark.parity
def test_t0_matches_parity_cfm(parity_case, parity_checkpoint: Path) -> None:
    yaml = pytest.importorskip("yaml")
    from fasttts_cli.nets.s2mel import load_s2mel
    from tests.parity import rel

    c = parity_case
    for k in ("s2mel_cat_condition", "refmel", "campplus_style", "cfm_z", "cfm_out_full"):
        if k not in c:
            pytest.skip(f"{c.name} has no {k}")
    cfg = yaml.safe_load((parity_checkpoint / "config.yaml").read_text(encoding="utf-8"))["s2mel"]
    s2mel = load_s2mel(parity_checkpoint / "s2mel.pth", cfg)
    mu = torch.from_numpy(c["s2mel_cat_condition"])
    tm = c["refmel"].shape[-1]
    n_steps = int(c["cfm_t_span"].shape[0]) - 1 if "cfm_t_span" in c else 25
    cfg_rate = float(c["cfm_inference_cfg_rate"]) if "cfm_inference_cfg_rate" in c else 0.7
    args = (
        mu,
        torch.tensor([mu.shape[1]]),
        torch.from_numpy(c["refmel"]),
        torch.tensor([tm]),
        torch.from_numpy(c["campplus_style"]),
    )
    got = pt.solve(s2mel.cfm.estimator, *args, torch.from_numpy(c["cfm_z"]).clone(), n_steps, cfg_rate)
    single, _ = s2mel.cfm.solve(*args, torch.from_numpy(c["cfm_z"]).clone(), n_steps, cfg_rate)
    assert float((got - single).abs().max()) <= 1e-5
    assert rel(got.numpy(), c["cfm_out_full"]) < 1e-4
    if "cfm_t_span" in c:
        assert np.array_equal(euler_times(n_steps), c["cfm_t_span"].astype(np.float32))


# -------------------------------------------------------------------------------- TS / BS definitions


@torch.inference_mode()
def _reference(dit, inputs, per_step: str, head_per_step: str) -> torch.Tensor:
    """Independent CFM loop over the DiT's own methods: at step s every attention/FFN module takes
    per_step[s] (C: both branches; T: output of the last step it ran; B: cond rows computed, uncond =
    cond + (uncond - cond) of the last C step) and the head head_per_step[s] (C or B)."""
    mu, x_lens, prompt, prompt_lens, style, z = inputs
    b, _, t_len = z.shape
    pos = torch.arange(t_len)[None]
    keep = ((pos >= prompt_lens[:, None]) & (pos < x_lens[:, None]))[:, None].float()
    prompt_x = (
        torch.nn.functional.pad(prompt, (0, t_len - prompt.shape[-1]))
        * (pos < prompt_lens[:, None])[:, None].float()
    )
    x = z * keep
    span = torch.linspace(0, 1, STEPS + 1)
    t = span[0]
    last_out: dict = {}
    last_gap: dict = {}
    head_gap = None
    for s in range(STEPS):
        dt = span[s + 1] - span[s]
        inp = dit.embed(
            torch.cat([x, x]),
            torch.cat([prompt_x, 0 * prompt_x]),
            torch.cat([x_lens, x_lens]),
            t.expand(2 * b),
            torch.cat([style, 0 * style]),
            torch.cat([mu, 0 * mu]),
        )
        h, skips = inp.h, {}
        for i, blk in enumerate(dit.transformer.layers):
            if i in dit.skip_plan:
                h = blk.skip_in(h, skips.pop(dit.skip_plan[i]))
            for kind in ("attn", "ffn"):

                def f(rows: slice, h=h, blk=blk, kind=kind, inp=inp):
                    if kind == "attn":
                        return blk.attention_out(h[rows], inp.c[rows], inp.rope, inp.key_mask[rows])
                    return blk.ffn_out(h[rows], inp.c[rows])

                d = per_step[s]
                if d == "C":
                    out = f(slice(None))
                    last_gap[kind, i] = out[b:] - out[:b]
                elif d == "B":
                    oc = f(slice(0, b))
                    out = torch.cat([oc, oc + last_gap[kind, i]])
                else:
                    out = last_out[kind, i]
                if d != "T":
                    last_out[kind, i] = out
                h = h + out
            if i in set(dit.skip_plan.values()):
                skips[i] = h
        v = dit.head(h, inp, t.expand(2 * b), torch.cat([x_lens, x_lens]))
        v_c, v_u = v[:b], v[b:]
        if head_per_step[s] == "C":
            head_gap = v_u - v_c
        else:
            v_u = v_c + head_gap
        x = (x + dt * (1.7 * v_c - 0.7 * v_u)) * keep
        t = t + dt
    return x


@pytest.mark.parametrize(
    "per_step, head",
    [
        ("CTTTTT", "CCCCCC"),  # all TS: every step reuses step 0
        ("CBBBBB", "CCCCCC"),  # all BS: residual of step 0
        ("CBBBBB", "CBBBBB"),  # all BS, head too (the uncond stream is then never computed)
        ("CCTBTC", "CCBCBB"),  # TS cache updated by C and B steps only; BS residual from the last C
    ],
)
def test_policy_gives_the_defined_values(dit, per_step: str, head: str) -> None:
    inputs = _inputs(1)
    want = _reference(dit, inputs, per_step, head)
    pol = Policy("T3", 0.01, (per_step,) * DEPTH, (per_step,) * DEPTH, head)
    got = pt.solve(dit, *inputs[:5], inputs[5].clone(), STEPS, plan=pol)
    assert float((got - want).abs().max()) <= 1e-6
    base = pt.solve(dit, *inputs[:5], inputs[5].clone(), STEPS)
    assert float((got - base).abs().max()) > 1e-4  # the skips really changed something


def test_skips_need_something_cached(dit) -> None:
    pol = Policy("T3", 0.01, ("TCCCCC",) * DEPTH, ("CCCCCC",) * DEPTH, "CCCCCC")
    with pytest.raises(ValueError, match="first step must compute"):
        pol.validate()
    with pytest.raises(PolicyError, match="temporal skip before any computation"):
        pt.solve(dit, *_inputs()[:5], _inputs()[5], STEPS, plan=pol)
    with pytest.raises(PolicyError, match="needs classifier-free guidance"):
        pt.solve(dit, *_inputs()[:5], _inputs()[5], STEPS, cfg_rate=0.0, plan=_uniform("B"))


# -------------------------------------------------------------------------------- ONNX Runtime pieces


@pytest.fixture(scope="module")
def ort_pieces(dit, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from fasttts_cli.build.s2mel_pieces import export_pieces
    from fasttts_cli.indextts2.cfm import ort_opener
    from fasttts_cli.indextts2.s2mel_cache.piecewise_ort import OrtPieces

    folder = tmp_path_factory.mktemp("pieces") / "s2mel_pieces"
    export_pieces(dit, folder)
    return OrtPieces.load(folder, ort_opener(1), diag=True)


def test_ort_pieces_match_torch_and_skip_work(dit, ort_pieces) -> None:
    from fasttts_cli.indextts2.s2mel_cache import piecewise_ort as po

    inputs = _inputs(2)
    np_in = [a.numpy() for a in inputs]
    for pol in (None, _uniform("T"), Policy("T3", 0.01, ("CTBTBT",) * DEPTH, ("CBTCTB",) * DEPTH, "CBBCBB")):
        want = pt.solve(dit, *inputs[:5], inputs[5].clone(), STEPS, plan=pol)
        ort_pieces.calls.clear()
        got = po.solve(ort_pieces, *np_in, STEPS, plan=pol)
        assert np.abs(got - want.numpy()).max() <= 1e-5
        if pol is not None:
            # a skipped module's graph is not run: one call per C or B step
            for layer in range(DEPTH):
                assert ort_pieces.calls.get(f"attn_{layer}", 0) == STEPS - pol.attn[layer].count("T")
                assert ort_pieces.calls.get(f"ffn_{layer}", 0) == STEPS - pol.ffn[layer].count("T")
    # calibration's diagonal measure agrees between the exported graphs and PyTorch
    times = euler_times(STEPS)
    run_t, x_t = pt.prepare(*inputs, times)
    run_o, x_o = po.prepare(*np_in, times)
    d_t = pt.diagonal_scores(dit, run_t, x_t)
    d_o = po.diagonal_scores(ort_pieces, run_o, x_o)
    assert np.abs(d_t - d_o).max() < 1e-5
    assert ((d_t > 0) & (d_t <= 1)).all()


# -------------------------------------------------------------------------------- calibration


def _rows(seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "mu": rng.standard_normal((n, 24)).astype(np.float32),
            "prompt": rng.standard_normal((80, p)).astype(np.float32),
            "style": rng.standard_normal(16).astype(np.float32),
        }
        for n, p in ((22, 8), (18, 6))
    ]


def test_calibration_is_deterministic_and_meets_its_bound(dit) -> None:
    a, rep_a = calibrate_modules(dit, _rows(0), ["T2", "T5"], steps=STEPS, seed=7)
    b, _ = calibrate_modules(dit, _rows(0), ["T5"], steps=STEPS, seed=7)  # levels are independent
    assert a.levels["T5"] == b.levels["T5"] and a.engine_id == b.engine_id  # (provenance records timings)
    assert a.calibration["frames"] == b.calibration["frames"]
    for r in rep_a:
        assert r.error < r.threshold
        assert r.trials > 0
    t2, t5 = a.levels["T2"], a.levels["T5"]
    assert t5.kept_fraction() < 1.0
    assert t5.kept_fraction() <= t2.kept_fraction()
    # a capped calibration (one step per pass, 4 trials each) still meets its bound
    capped, rep_c = calibrate_modules(dit, _rows(0), ["T5"], steps=STEPS, seed=7, max_trials=4)
    assert rep_c[0].truncated and rep_c[0].trials <= 16 and rep_c[0].error < rep_c[0].threshold
    assert capped.levels["T5"].kept_fraction() < 1.0
    # the table's own error, recomputed from scratch, is what the calibration reported
    from fasttts_cli.indextts2.s2mel_cache.calibrate import stack_rows

    batch = {k: torch.from_numpy(v) for k, v in stack_rows(_rows(0), 7).items()}
    args = (batch["mu"], batch["x_lens"], batch["prompt"], batch["prompt_lens"], batch["style"], batch["z"])
    ref = pt.solve(dit, *args, STEPS).numpy()
    got = pt.solve(dit, *args, STEPS, plan=t5).numpy()
    keep = pt.prepare(*args, euler_times(STEPS))[0].keep.numpy()
    assert relative_mae(got, ref, keep) == pytest.approx(t5.error, rel=1e-6)


# -------------------------------------------------------------------------------- policies and engines


def _engine(folder: Path, digest: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "dit_cfg_step.onnx").write_bytes(b"x")
    comp = ComponentEntry(file="dit_cfg_step.onnx", backend="onnxruntime-cpu", precision="fp32")
    write_manifest(
        folder,
        Manifest("indextts2", "2.0", digest, "cpu-fp32", {}, {"dit_cfg_step": comp}),
    )
    return folder


def _set(engine_id: str) -> PolicySet:
    return PolicySet(engine_id, DEPTH, STEPS, "uniform", 0.7, {"T3": _uniform("T")})


def test_policy_file_round_trip_and_engine_check(tmp_path: Path) -> None:
    mine = _engine(tmp_path / "a", "d" * 64)
    other = _engine(tmp_path / "b", "e" * 64)
    before = read_manifest(mine).identity()
    ps = _set(engine_identity(read_manifest(mine)))
    write_policy_set(mine, ps)
    assert read_manifest(mine).identity() != before  # cached outputs keyed on the engine are redone
    assert read_manifest(mine).s2mel_cache_policy["levels"] == ["T3"]
    pol = load_policy(mine, "T3", steps=STEPS, schedule="uniform", cfg_rate=0.7)
    assert pol == ps.levels["T3"]
    assert load_policy(mine, "T0", steps=STEPS, schedule="uniform", cfg_rate=0.7) is None
    # another engine's policy is refused, whether written there or copied in by hand
    with pytest.raises(EngineMismatchError, match="calibrated for engine"):
        write_policy_set(other, ps)
    (other / POLICY_FILE).write_text((mine / POLICY_FILE).read_text())
    with pytest.raises(EngineMismatchError, match="belongs to another engine"):
        load_policy(other, "T3", steps=STEPS, schedule="uniform", cfg_rate=0.7)
    # other run settings, uncalibrated levels, unknown levels
    with pytest.raises(EngineMismatchError, match=r"steps 25 .calibrated for 6"):
        load_policy(mine, "T3", steps=25, schedule="uniform", cfg_rate=0.7)
    with pytest.raises(EngineMismatchError, match="schedule 'sway'"):
        load_policy(mine, "T3", steps=STEPS, schedule="sway", cfg_rate=0.7)
    with pytest.raises(UsageError, match="T5 was not calibrated"):
        load_policy(mine, "T5", steps=STEPS, schedule="uniform", cfg_rate=0.7)
    with pytest.raises(UsageError, match="unknown"):
        load_policy(mine, "T9", steps=STEPS, schedule="uniform", cfg_rate=0.7)
    (other / POLICY_FILE).unlink()
    with pytest.raises(UsageError, match="has none"):
        load_policy(other, "T3", steps=STEPS, schedule="uniform", cfg_rate=0.7)


def test_policy_json_validation() -> None:
    ps = _set("x" * 64)
    again = PolicySet.from_json(ps.to_json())
    assert again == ps
    bad = json.loads(ps.to_json())
    bad["levels"]["T3"]["attn"][0] = "CTQTTT"
    with pytest.raises(EngineMismatchError, match="unknown decisions"):
        PolicySet.from_json(json.dumps(bad))
    assert _uniform("T").kept_fraction() == pytest.approx(1 / STEPS)
    assert _uniform("B").kept_fraction() == pytest.approx((2 + (STEPS - 1)) / (2 * STEPS))


def test_runtime_side_needs_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fasttts_cli.indextts2.s2mel_cache import calibrate, piecewise_ort, policy; "
        "from fasttts_cli.cfm import loop as core, schedules\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)


# -------------------------------------------------------------------------------- schedules


def test_uniform_grid_is_torch_linspace_and_t_accumulates() -> None:
    for steps in range(1, 120):
        assert np.array_equal(euler_times(steps), torch.linspace(0, 1, steps + 1).numpy())
    ts, _ = step_times(euler_times(25))
    t = torch.linspace(0, 1, 26)[0]
    for k in range(25):
        assert float(t) == float(ts[k])
        t = t + (torch.linspace(0, 1, 26)[k + 1] - torch.linspace(0, 1, 26)[k])


def test_sway_grid() -> None:
    g = sway_grid(16)
    assert g[0] == 0.0 and g[-1] == 1.0 and np.all(np.diff(g) > 0)
    assert np.diff(g)[0] < np.diff(g)[-1]  # denser near t = 0
    u = euler_times(16).astype(np.float64)
    assert np.allclose(g, 1 - np.cos(np.pi / 2 * u), atol=1e-6)
    assert np.array_equal(sway_grid(16, 0.0), euler_times(16))
    with pytest.raises(ValueError):
        euler_times(10, "cosine")
