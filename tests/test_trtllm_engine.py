"""`fasttts build` and the engine with the GPT on TensorRT-LLM, on the CPU.

The build writes the converted checkpoint into the engine folder and runs `finalize` + `trtllm-build`
in TensorRT-LLM's environment: that orchestration is checked with a stand-in interpreter that records
its command lines and writes an engine file. With FASTTTS_TRTLLM_BACKEND=reference the engine drives the
worker's numpy backend over the same protocol, so a whole line (voice, GPT, latent, s2mel, vocoder)
runs here and must equal the ONNX engine's result on the same tiny checkpoint.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.errors import EngineMismatchError, FastTTSError, MissingDependencyError
from fasttts_cli.indextts2.engine import IndexTTS2Engine, check_manifest
from fasttts_cli.indextts2.gpt_trtllm import TRTLLM_BACKEND_ENV, TRTLLM_PYTHON_ENV, LinePrompt
from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
from fasttts_cli.spec.engine_folder import read_manifest
from fasttts_cli.synth.synthesizer import SynthRequest
from tests.conftest_engine import *  # noqa: F403 (fixtures)

PRESET = """\
name = "cpu-trtllm-test"
description = "GPT through the TensorRT-LLM worker, everything else on ONNX Runtime CPU"

[components]
gpt = { backend = "tensorrt-llm", precision = "fp32", max_beam_width = 3 }
"""

# Stands in for TensorRT-LLM's Python: records each call, and `build` writes an engine file.
FAKE_PYTHON = """\
#!{python}
import json, os, pathlib, sys
log = pathlib.Path({log!r})
with log.open("a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_TRTLLM_FAIL") == sys.argv[2]:
    print("simulated failure in " + sys.argv[2])
    sys.exit(7)
if sys.argv[2] == "build":
    out = pathlib.Path(sys.argv[4])
    out.mkdir(parents=True, exist_ok=True)
    (out / "rank0.engine").write_bytes(b"not a real engine")
    (out / "config.json").write_text("{{}}")
"""


@pytest.fixture(scope="module")
def preset_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("preset") / "cpu-trtllm-test.toml"
    p.write_text(PRESET, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def ref_engine_dir(
    tiny_checkpoint_dir: Path, preset_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    import torch

    from fasttts_cli.build.export import build_engine

    torch.set_num_threads(1)
    mp = pytest.MonkeyPatch()
    mp.setenv(TRTLLM_BACKEND_ENV, "reference")
    try:
        return build_engine(tiny_checkpoint_dir, preset_file, tmp_path_factory.mktemp("trtllm") / "engine")
    finally:
        mp.undo()


def _fake_python(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "calls.jsonl"
    py = tmp_path / "trtllm-python"
    py.write_text(FAKE_PYTHON.format(python=sys.executable, log=str(log)), encoding="utf-8")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return py, log


# ------------------------------------------------------------------------------------------ build


def test_build_refuses_without_the_trtllm_environment(
    tiny_checkpoint_dir: Path, preset_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.build.export import build_engine

    monkeypatch.delenv(TRTLLM_PYTHON_ENV, raising=False)
    monkeypatch.delenv(TRTLLM_BACKEND_ENV, raising=False)
    with pytest.raises(MissingDependencyError, match=TRTLLM_PYTHON_ENV) as e:
        build_engine(tiny_checkpoint_dir, preset_file, tmp_path / "engine")
    assert TRTLLM_BACKEND_ENV in (e.value.hint or "")
    assert not (tmp_path / "engine").exists()
    monkeypatch.setenv(TRTLLM_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(MissingDependencyError, match="not an executable file"):
        build_engine(tiny_checkpoint_dir, preset_file, tmp_path / "engine")


def test_build_runs_finalize_then_trtllm_build(
    tiny_checkpoint_dir: Path, preset_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.build.export import build_engine

    py, log = _fake_python(tmp_path)
    monkeypatch.setenv(TRTLLM_PYTHON_ENV, str(py))
    monkeypatch.delenv(TRTLLM_BACKEND_ENV, raising=False)
    out = build_engine(tiny_checkpoint_dir, preset_file, tmp_path / "engine", components=["campplus"])
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert [c[1] for c in calls] == ["finalize", "build"]
    assert Path(calls[0][0]).name == "trtllm_convert.py" and calls[0][2] == calls[1][2]
    flags = calls[1][4:]
    opt = dict(zip(flags[::2], flags[1::2], strict=True))
    assert opt["--kv_cache_type"] == "continuous" and opt["--remove_input_padding"] == "enable"
    assert opt["--max_beam_width"] == "1"
    cfg = json.loads((out / "gpt_trtllm" / "checkpoint" / tc.CONFIG_FILE).read_text(encoding="utf-8"))
    lay = cfg["indextts2"]
    from fasttts_cli.spec.presets import load_preset

    rows = load_preset(preset_file).limits.max_batch * 3
    assert int(opt["--max_batch_size"]) == rows
    assert int(opt["--max_prompt_embedding_table_size"]) == rows * lay["n_conds"]
    assert int(opt["--max_input_len"]) == lay["n_conds"] + lay["text_pos_rows"] + lay["mel_pos_rows"]
    # the quantized copy finalize works on is temporary; the float checkpoint and the engine stay
    assert not Path(calls[0][2]).exists()
    assert (out / "gpt_trtllm" / "engine" / "rank0.engine").is_file()
    m = read_manifest(out)
    entry = m.components["gpt_trtllm"]
    assert entry.backend == "tensorrt-llm" and entry.precision == "fp32" and len(entry.sha256) == 64
    assert "gpt_trunk" not in m.components


def test_build_failure_in_trtllm_leaves_no_engine(
    tiny_checkpoint_dir: Path, preset_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.build.export import build_engine

    py, _ = _fake_python(tmp_path)
    monkeypatch.setenv(TRTLLM_PYTHON_ENV, str(py))
    monkeypatch.setenv("FAKE_TRTLLM_FAIL", "build")
    with pytest.raises(FastTTSError, match=r"(?s)exit 7.*simulated failure in build"):
        build_engine(tiny_checkpoint_dir, preset_file, tmp_path / "engine", components=["campplus"])
    assert not (tmp_path / "engine").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".engine.")]  # no temporary left


# ------------------------------------------------------------------------------------------ runtime


def test_reference_build_writes_the_checkpoint_only(ref_engine_dir: Path) -> None:
    m = read_manifest(ref_engine_dir)
    assert m.components["gpt_trtllm"].backend == "tensorrt-llm" and "gpt_trunk" not in m.components
    ckpt = ref_engine_dir / "gpt_trtllm" / "checkpoint"
    assert (ckpt / tc.WEIGHTS_FILE).is_file() and not (ref_engine_dir / "gpt_trtllm" / "engine").exists()
    check_manifest(m, ref_engine_dir)  # loads: the trunk is not required with the GPT on TensorRT-LLM


def test_missing_engine_is_named_unless_reference(
    ref_engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRTLLM_BACKEND_ENV, raising=False)
    e = IndexTTS2Engine.load(ref_engine_dir)
    prompt = e.prefix(np.zeros((32, e.model_dim), np.float32), np.zeros(e.model_dim, np.float32), [5, 6])
    assert isinstance(prompt, LinePrompt) and len(prompt) == 34 + 2 + 2
    with pytest.raises(EngineMismatchError, match="no built TensorRT-LLM engine") as err:
        _ = e.trtllm
    assert TRTLLM_BACKEND_ENV in (err.value.hint or "")
    monkeypatch.setenv(TRTLLM_BACKEND_ENV, "nonsense")
    with pytest.raises(MissingDependencyError, match="nonsense"):
        _ = e.trtllm


def test_line_equals_the_onnx_engine(
    ref_engine_dir: Path,
    tiny_engine_dir: Path,
    voice_wav: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same checkpoint, GPT through the worker (numpy reference) vs the ONNX trunk: the same sampled
    codes with 3 beams and the same audio, line by line and batched."""
    monkeypatch.setenv(TRTLLM_BACKEND_ENV, "reference")
    texts = ["Hello there, my friend.", "A second line, a little longer than the first one."]
    results = []
    for folder in (ref_engine_dir, tiny_engine_dir):
        s = IndexTTS2Synthesizer.load(folder, cache_dir=tmp_path / folder.name)
        try:
            v = s.prepare_voice(voice_wav)
            reqs = [
                SynthRequest(
                    line_id=str(i), text=t, voice=v, seed=7 + i, options={"max_tokens": 12, "steps": 3}
                )
                for i, t in enumerate(texts)
            ]
            results.append(s.synthesize(reqs))
        finally:
            s.close()
    ours, onnx = results
    for a, b in zip(ours, onnx, strict=True):
        assert a.ok and b.ok, (a.error, b.error)
        assert a.n_tokens == b.n_tokens and a.audio.shape == b.audio.shape
        np.testing.assert_allclose(a.audio, b.audio, rtol=0, atol=1e-4)
    assert os.environ[TRTLLM_BACKEND_ENV] == "reference"


def test_manifest_backends_the_runtime_drives(tiny_engine_dir: Path) -> None:
    """TensorRT plans load (sessions_trt); an unknown backend is named; a TensorRT-LLM GPT needs its
    folder."""
    from dataclasses import replace

    m = read_manifest(tiny_engine_dir)
    comps = dict(m.components)
    comps["bigvgan"] = replace(comps["bigvgan"], backend="tensorrt")
    check_manifest(replace(m, components=comps), tiny_engine_dir)
    comps["bigvgan"] = replace(comps["bigvgan"], backend="bogus")
    with pytest.raises(EngineMismatchError, match="'bigvgan' backend 'bogus'"):
        check_manifest(replace(m, components=comps), tiny_engine_dir)
    comps = dict(m.components)
    del comps["gpt_trunk"]
    with pytest.raises(EngineMismatchError, match="'gpt_trunk' is missing"):
        check_manifest(replace(m, components=comps), tiny_engine_dir)
    comps["gpt_trtllm"] = replace(m.components["campplus"], file="gpt_trtllm", backend="tensorrt-llm")
    with pytest.raises(EngineMismatchError, match="folder 'gpt_trtllm' is missing"):
        check_manifest(replace(m, components=comps), tiny_engine_dir)
