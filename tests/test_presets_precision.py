"""Shipped precision presets parse and validate; bad values name file, key and allowed values;
gpu_stack.requirements says what each preset needs and whether this machine has it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttts_cli.backends import gpu_stack
from fasttts_cli.errors import InputError
from fasttts_cli.spec.presets import available_presets, load_preset, parse_preset

DIT_INT8 = 'dit = { backend = "onnxruntime-cpu", precision = "int8", method = "dynamic", per_channel = true }'
SHIPPED = ("cpu-fp32", "cpu-int8", "cpu-int4", "fp16", "w8a16", "w4a16")

NO_GPU = gpu_stack.GpuStack(
    torch="2.13.0",
    onnx="1.23.2",
    onnxruntime="1.32.0",
    onnxruntime_package="onnxruntime",
    ort_providers=("CPUExecutionProvider",),
)
FULL_GPU = gpu_stack.GpuStack(
    gpus=("NVIDIA H200",),
    driver="580.1",
    torch="2.13.0",
    torch_cuda=True,
    onnx="1.23.2",
    onnxruntime="1.32.0",
    onnxruntime_package="onnxruntime-gpu",
    ort_providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
    tensorrt="10.14.1",
    cuda_python="12.9.0",
    tensorrt_llm="1.2.1",
    tensorrt_llm_python="/opt/trtllm/bin/python",
)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_preset_parses_and_validates(name: str) -> None:
    assert name in available_presets()
    p = load_preset(name)
    assert p.name == name
    assert set(p.components) == {
        "w2v_bert",
        "codec",
        "campplus",
        "conditioners",
        "gpt",
        "s2mel",
        "dit",
        "vocoder",
    }
    gpu_stack.check_preset(p)
    # BigVGAN never leaves fp32; an integer DiT is dynamic int8 and takes one line per call.
    assert p.components["vocoder"].precision == "fp32"
    dit = p.components["dit"]
    assert dit.precision in ("fp32", "fp16", "int8")
    if dit.precision == "int8":
        assert dit.options == {"method": "dynamic", "per_channel": True}
        assert p.s2mel.rows_per_call == 1


def test_cpu_quant_presets_state_block_and_accuracy_level() -> None:
    i8, i4 = load_preset("cpu-int8"), load_preset("cpu-int4")
    assert (i8.components["gpt"].precision, i4.components["gpt"].precision) == ("int8", "int4")
    assert i8.components["gpt"].options["accuracy_level"] == 4
    assert i4.components["gpt"].options["accuracy_level"] == 4
    assert i8.components["gpt"].options["block_size"] == 128
    assert i4.components["gpt"].options["block_size"] == 32
    assert all(c.backend == "onnxruntime-cpu" for c in i4.components.values())
    # the engines differ in build-time keys, so an int8 engine refuses the int4 preset
    assert i8.build_keys() != i4.build_keys()
    assert i8.run_keys() == load_preset("cpu-fp32").run_keys()


def test_gpu_presets_gpt_backends() -> None:
    want = {
        "fp16": ("tensorrt", "fp16"),
        "w8a16": ("tensorrt-llm", "w8a16"),
        "w4a16": ("tensorrt-llm", "w4a16"),
    }
    for name, bp in want.items():
        g = load_preset(name).components["gpt"]
        assert (g.backend, g.precision) == bp
        others = {c.backend for k, c in load_preset(name).components.items() if k != "gpt"}
        assert others == {"tensorrt"}


def _write(tmp_path: Path, comp_line: str, name: str = "mine") -> Path:
    text = Path(available_presets()["cpu-int8"]).read_text(encoding="utf-8")
    lines = [comp_line if ln.startswith("gpt = ") else ln for ln in text.splitlines()]
    p = tmp_path / f"{name}.toml"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("line", "key", "allowed"),
    [
        (
            'gpt = { backend = "onnxruntime-cpu", precision = "int8", block_size = 48 }',
            "components.gpt.block_size = 48",
            "16, 32, 64, 128, 256",
        ),
        (
            'gpt = { backend = "onnxruntime-cpu", precision = "int4", accuracy_level = 7 }',
            "components.gpt.accuracy_level = 7",
            "0, 1, 2, 3, 4",
        ),
        (
            'gpt = { backend = "onnxruntime-cpu", precision = "w8a16" }',
            "components.gpt.precision = 'w8a16'",
            "fp32, int8, int4",
        ),
        (
            'gpt = { backend = "onnxruntime-cpu", precision = "int8", blocksize = 64 }',
            "components.gpt.blocksize",
            "method, block_size, accuracy_level, symmetric",
        ),
        (
            'gpt = { backend = "onnxruntime-cpu", precision = "int4", method = "dynamic" }',
            "components.gpt.method = 'dynamic'",
            "matmulnbits",
        ),
        (
            'gpt = { backend = "onnxruntime-cpu", precision = "int8", symmetric = "yes" }',
            "components.gpt.symmetric = 'yes'",
            "true, false",
        ),
        (
            'gpt = { backend = "tensorrt-llm", precision = "w4a16", max_beam_width = 0 }',
            "components.gpt.max_beam_width = 0",
            "1, 2, 3",
        ),
    ],
)
def test_bad_option_names_file_key_and_allowed(tmp_path: Path, line: str, key: str, allowed: str) -> None:
    path = _write(tmp_path, line)
    p = parse_preset(path)
    with pytest.raises(InputError) as ei:
        gpu_stack.check_preset(p)
    msg = str(ei.value)
    assert str(path) in msg and key in msg and allowed in msg, msg


def test_quantizing_vocoder_or_trtllm_elsewhere_is_refused(tmp_path: Path) -> None:
    text = Path(available_presets()["cpu-int8"]).read_text(encoding="utf-8")
    bad = text.replace(
        'vocoder = { backend = "onnxruntime-cpu", precision = "fp32" }',
        'vocoder = { backend = "onnxruntime-cpu", precision = "int8" }',
    )
    path = tmp_path / "v.toml"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(InputError, match=r"components\.vocoder\.precision = 'int8'"):
        gpu_stack.check_preset(parse_preset(path))
    dit_line = DIT_INT8
    assert dit_line in text
    bad2 = text.replace(dit_line, 'dit = { backend = "tensorrt-llm", precision = "fp16" }')
    path.write_text(bad2, encoding="utf-8")
    with pytest.raises(InputError, match=r"only the GPT runs on TensorRT-LLM"):
        gpu_stack.check_preset(parse_preset(path))


def test_integer_dit_needs_dynamic_int8_and_one_line_per_call(tmp_path: Path) -> None:
    text = Path(available_presets()["cpu-int8"]).read_text(encoding="utf-8")
    dit_line = DIT_INT8
    path = tmp_path / "d.toml"
    path.write_text(
        text.replace(dit_line, 'dit = { backend = "onnxruntime-cpu", precision = "int8", block_size = 128 }'),
        encoding="utf-8",
    )
    with pytest.raises(InputError) as ei:
        gpu_stack.check_preset(parse_preset(path))
    assert str(path) in str(ei.value) and "components.dit" in str(ei.value) and "dynamic" in str(ei.value)
    # the parser refuses batching lines into one integer-DiT call: they would change each other's audio
    path.write_text(text.replace("rows_per_call = 1", "rows_per_call = 0"), encoding="utf-8")
    with pytest.raises(InputError) as ei:
        parse_preset(path)
    assert str(path) in str(ei.value) and "s2mel.rows_per_call = 0" in str(ei.value)
    fp32_dit = text.replace(dit_line, 'dit = { backend = "onnxruntime-cpu", precision = "fp32" }')
    path.write_text(fp32_dit.replace("rows_per_call = 1", "rows_per_call = 0"), encoding="utf-8")
    gpu_stack.check_preset(parse_preset(path))


def test_unknown_precision_is_rejected_by_the_parser(tmp_path: Path) -> None:
    path = _write(tmp_path, 'gpt = { backend = "onnxruntime-cpu", precision = "int3" }')
    with pytest.raises(InputError) as ei:
        parse_preset(path)
    assert str(path) in str(ei.value) and "int3" in str(ei.value) and "int4" in str(ei.value)


def _missing(preset: str, stack: gpu_stack.GpuStack) -> set[str]:
    return {r.what for r in gpu_stack.requirements(load_preset(preset), stack) if not r.present}


def test_requirements_on_a_cpu_machine() -> None:
    for name in ("cpu-fp32", "cpu-int8", "cpu-int4"):
        assert _missing(name, NO_GPU) == set()
        st = gpu_stack.preset_status(load_preset(name), NO_GPU)
        assert st.can_build and st.can_run
    miss = _missing("w8a16", NO_GPU)
    assert miss == {
        "NVIDIA GPU",
        "tensorrt>=10,<12",
        "cuda-python",
        "tensorrt-llm 1.2.x (own Python 3.12 environment)",
    }
    st = gpu_stack.preset_status(load_preset("w8a16"), NO_GPU)
    assert not st.can_run and any("FASTTTS_TRTLLM_PYTHON" in m for m in st.missing)


def test_requirements_on_a_full_gpu_machine() -> None:
    for name in SHIPPED:
        st = gpu_stack.preset_status(load_preset(name), FULL_GPU)
        assert st.can_build and st.can_run, st.missing
    reqs = {r.what: r for r in gpu_stack.requirements(load_preset("w8a16"), FULL_GPU)}
    assert set(reqs["tensorrt>=10,<12"].components) == {
        "w2v_bert",
        "codec",
        "campplus",
        "conditioners",
        "s2mel",
        "dit",
        "vocoder",
    }
    assert reqs["tensorrt-llm 1.2.x (own Python 3.12 environment)"].components == ("gpt",)
    # fp16 needs no TensorRT-LLM at all
    fp16 = {r.what for r in gpu_stack.requirements(load_preset("fp16"), NO_GPU) if not r.present}
    assert fp16 == {"NVIDIA GPU", "tensorrt>=10,<12", "cuda-python"}


def test_every_found_preset_validates() -> None:
    """Presets other issues ship (gpu-torch-*) pass the same validation."""
    for name in available_presets():
        gpu_stack.check_preset(load_preset(name))


def test_wrong_versions_are_reported() -> None:
    old = gpu_stack.GpuStack(**{**FULL_GPU.__dict__, "tensorrt": "9.3.0", "tensorrt_llm": "1.3.0"})
    miss = _missing("w4a16", old)
    assert "tensorrt>=10,<12" in miss and "tensorrt-llm 1.2.x (own Python 3.12 environment)" in miss
    old_ort = gpu_stack.GpuStack(**{**NO_GPU.__dict__, "onnxruntime": "1.20.1"})
    assert _missing("cpu-int8", old_ort) == {"onnxruntime (CPU provider)"}
    assert _missing("cpu-fp32", old_ort) == set()


def test_detect_runs_here_without_side_effects() -> None:
    st = gpu_stack.detect()
    assert st.onnxruntime is not None and "CPUExecutionProvider" in st.ort_providers
    assert st.torch_cuda is None  # torch not probed unless asked
    assert isinstance(st.to_json()["gpus"], list)


def test_s2mel_rows_per_call(tmp_path: Path) -> None:
    """CPU presets run s2mel and the vocoder one line at a time; GPU presets keep the whole batch; a
    negative value names the file and key."""
    assert all(load_preset(n).s2mel.rows_per_call == 1 for n in ("cpu-fp32", "cpu-int8", "cpu-int4"))
    assert all(load_preset(n).s2mel.rows_per_call == 0 for n in ("fp16", "w8a16", "w4a16"))
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n[s2mel]\nrows_per_call = -1\n', encoding="utf-8")
    with pytest.raises(InputError) as ei:
        parse_preset(path)
    assert str(path) in str(ei.value) and "s2mel.rows_per_call = -1" in str(ei.value)
