"""The torch GPU acceptance program (fasttts_cli/tools/accept_torch.py) end to end on the CPU (--sim-cpu):
the same code paths as on the GPU (parity of every stage, the bench of ours vs eager), one table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttts_cli.tools import accept_torch
from tests.parity import CACHE, checkpoint_for, load_cases, parity_dir

pytestmark = pytest.mark.gpu_fake


def test_sim_cpu_runs_every_stage_and_writes_one_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cases = load_cases()
    assert cases, f"no parity vectors in {parity_dir()} (set FASTTTS_PARITY_DIR)"
    for seed in {c.weight_seed for c in cases}:
        checkpoint_for(seed)  # the tests' shared, locked cache: the program reuses it
    argv = ["--sim-cpu", "--threads", "2", "--parity-dir", str(parity_dir()), "--parity-cache", str(CACHE)]
    rc = accept_torch.main([*argv, "--out", str(tmp_path)])
    report = json.loads((tmp_path / "accept_torch.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    failed = [c for c in report["checks"] if not c["ok"] and c["mode"] != "skipped"]
    assert rc == 0 and report["ok"], failed
    row = checks[f"parity {cases[0].name} fp32"]  # the first case: the others are CPU parity tests' job
    assert row["mode"] == "sim" and "11/11 within tolerance" in row["detail"]
    assert not any(
        name.startswith("parity") and cases[0].name not in name for name in checks if "fp32" in name
    )
    for name in ("bench eager-fp16 B=1", "bench eager-fp16 B=2", "bench ours B=1", "bench ours B=2"):
        assert checks[name]["ok"] and checks[name]["seconds"] > 0
    assert "bench ours-3beam B=1" in checks
    targets = [c for c in report["checks"] if c["name"].startswith("target:")]
    assert targets and all(c["mode"] == "skipped" for c in targets)  # stated for an H200
    assert checks["pytest -m gpu tests/test_torch_backend.py"]["mode"] == "skipped"
    for name in ("2.5 torch fp32 on cpu vs CPU fp32", "2.5 speaks ja/es/ar (gpu-torch-fp16)"):
        assert checks[name]["ok"] and checks[name]["mode"] == "sim"
    assert "gpt logits" in checks["2.5 torch fp32 on cpu vs CPU fp32"]["detail"]
    for name in ("separation 3 s on cpu", "separation blocks == one pass"):
        assert checks[name]["ok"] and checks[name]["mode"] == "sim"
    out = capsys.readouterr().out
    assert out.count("== accept_torch: ok") == 1  # one table


def test_a_failed_check_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every failure counts: one bench row with a non-finite output makes the exit status 1 (no `|| true`),
    and the other checks still run and are reported."""
    from fasttts_cli.tools import bench_torch

    real = bench_torch.run_ours

    def nan_out(*args, **kwargs):  # type: ignore[no-untyped-def]
        row = real(*args, **kwargs)
        row.extra["finite"] = False
        return row

    monkeypatch.setattr(bench_torch, "run_ours", nan_out)
    argv = [
        "--sim-cpu",
        "--threads",
        "2",
        "--skip-parity",
        "--skip-v25",
        "--skip-separation",
        "--batches",
        "1",
        "--beam3-batches",
        "",
    ]
    assert accept_torch.main([*argv, "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "accept_torch.json").read_text())
    bad = [c for c in report["checks"] if not c["ok"] and c["mode"] != "skipped"]
    assert [c["name"] for c in bad] == ["bench ours B=1"] and "non-finite output" in bad[0]["detail"]
    assert report["ok"] is False and any(
        c["name"] == "bench eager-fp16 B=1" and c["ok"] for c in report["checks"]
    )


def test_a_2_5_stage_out_of_bounds_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also without fugashi (the GPU image has no fugashi + unidic-lite, 47 MB, too much to carry): ja is a
    skipped row with the reason, es and ar are still spoken, and only the out-of-bounds stage fails."""
    import sys

    from fasttts_cli.indextts25 import text_japanese
    from fasttts_cli.tools import accept_torch25

    monkeypatch.setitem(accept_torch25.WAV_TOL, "fp32", -1.0)  # no audio is that close: the check must fail
    monkeypatch.setitem(sys.modules, "fugashi", None)  # `import fugashi` raises ImportError, as there
    text_japanese._tagger.cache_clear()
    argv = ["--sim-cpu", "--threads", "2", "--skip-parity", "--skip-separation", "--batches", "1"]
    argv += ["--beam3-batches", ""]
    try:
        assert accept_torch.main([*argv, "--skip-baseline", "--out", str(tmp_path)]) == 1
    finally:
        text_japanese._tagger.cache_clear()
    report = json.loads((tmp_path / "accept_torch.json").read_text())
    bad = [c for c in report["checks"] if not c["ok"] and c["mode"] != "skipped"]
    assert [c["name"] for c in bad] == ["2.5 torch fp32 on cpu vs CPU fp32"] and "audio" in bad[0]["detail"]
    checks = {c["name"]: c for c in report["checks"]}
    for preset in accept_torch25.PRESETS.values():
        ja = checks[f"2.5 speaks ja ({preset})"]
        assert ja["mode"] == "skipped" and "fugashi" in ja["detail"] and "\n" not in ja["detail"]
        rest = checks[f"2.5 speaks es/ar ({preset})"]
        assert rest["ok"] and rest["mode"] == "sim" and rest["detail"].startswith("2 lines"), rest


def test_without_a_gpu_the_real_run_fails_with_a_clear_check(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the real run would start")
    assert accept_torch.main(["--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "accept_torch.json").read_text())
    assert report["checks"][-1]["name"] == "cuda device" and "--sim-cpu" in report["checks"][-1]["detail"]


def test_dispatcher_runs_the_named_program(tmp_path: Path) -> None:
    from fasttts_cli.tools import acceptance

    assert acceptance.main(["nope"]) == 2
    assert (
        acceptance.main(
            [
                "torch",
                "--sim-cpu",
                "--skip-parity",
                "--skip-v25",
                "--batches",
                "1",
                "--beam3-batches",
                "",
                "--skip-baseline",
                "--threads",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "accept_torch.json").read_text())["ok"] is True
