"""The TensorRT acceptance program end to end on the tiny checkpoint through the fakes (`--sim-cpu`),
and the static output-size check over every component of the engine it builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from fasttts_cli.build.onnx_shapes import (  # noqa: E402
    VALUE_DEPENDENT_OUTPUTS,
    check_tensorrt_outputs,
    output_dims,
)
from fasttts_cli.spec.engine_folder import read_manifest  # noqa: E402
from fasttts_cli.tools import accept_tensorrt  # noqa: E402

pytestmark = [pytest.mark.gpu_fake, pytest.mark.slow]


@pytest.fixture(scope="module")
def accepted(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    from fasttts_cli.build.tiny import ensure_tiny_checkpoint
    from tests.parity import CACHE

    torch.set_num_threads(1)
    work = tmp_path_factory.mktemp("accept-trt")
    ckpt = ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0)
    (work / "tiny-checkpoint").symlink_to(ckpt, target_is_directory=True)
    rc = accept_tensorrt.main(["--sim-cpu", "--work", str(work), "--out", str(work)])
    return rc, work


def test_sim_cpu_acceptance_passes(accepted: tuple[int, Path]) -> None:
    rc, work = accepted
    report = json.loads((work / f"{accept_tensorrt.PROGRAM}.json").read_text())
    failed = [c for c in report["checks"] if not c["ok"]]
    assert rc == 0 and report["ok"], failed
    names = [c["name"] for c in report["checks"]]
    assert {c["mode"] for c in report["checks"]} == {"sim"}
    assert sum(n.endswith("plan vs cpu fp32") for n in names) == 11
    assert sum(n.endswith(": output sizes") for n in names) == 11
    assert "tiny gpt_trunk: 3-beam decode, KV on the device" in names
    assert "tiny gpt_trunk: teacher-forced logits vs cpu fp32" in names


def test_static_check_over_the_tiny_engine(accepted: tuple[int, Path]) -> None:
    _, work = accepted
    folder = work / "tiny-cpu-fp32"
    manifest = read_manifest(folder)
    assert len(manifest.components) == 11
    for name, entry in manifest.components.items():
        path = folder / entry.file
        assert check_tensorrt_outputs(path, name) == [], name
        value = {o for o, dims in output_dims(path).items() if any(d.kind == "value" for d in dims)}
        assert value == set(VALUE_DEPENDENT_OUTPUTS.get(name, ())), name
    # undeclared, the two value-dependent components are flagged
    for name in VALUE_DEPENDENT_OUTPUTS:
        assert check_tensorrt_outputs(folder / manifest.components[name].file, name, declared={})
