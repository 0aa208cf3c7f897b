"""The backend registry is the one list of backends: presets, gpu_stack, doctor, the manifest check and
the engine's session opening read it; importing it imports no GPU library; a backend added to it is
driven by the engine with no other change."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fasttts_cli.backends import gpu_stack
from fasttts_cli.errors import EngineMismatchError, InputError, MissingDependencyError
from fasttts_cli.indextts2.components import check_manifest
from fasttts_cli.spec import presets, registry
from fasttts_cli.spec.engine_folder import read_manifest
from tests.conftest_engine import *  # noqa: F403 (fixtures)
from tests.test_trtllm_engine import preset_file, ref_engine_dir  # noqa: F401 (fixtures)


def test_one_list_of_backends() -> None:
    assert presets.BACKENDS == registry.names() == tuple(registry.BACKENDS)
    assert registry.precisions() == gpu_stack.BACKEND_PRECISIONS
    every = {p for s in registry.BACKENDS.values() for p in s.precisions}
    assert every == set(registry.PRECISIONS) == set(presets.PRECISIONS)
    assert all(set(s.components) <= set(registry.COMPONENTS) for s in registry.BACKENDS.values())
    assert registry.with_artifact(registry.GRAPH) == ("onnxruntime-cpu", "onnxruntime-cuda", "tensorrt")
    assert registry.with_artifact(registry.FOLDER) == ("tensorrt-llm",)
    assert registry.on_device(registry.CPU) == ("onnxruntime-cpu",)


def test_importing_the_registry_imports_no_backend_library() -> None:
    code = (
        "import sys, fasttts_cli.spec.registry as r; "
        "heavy = [m for m in ('onnxruntime', 'tensorrt', 'tensorrt_llm', 'torch', 'cuda') "
        "if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", list(registry.BACKENDS))
def test_every_opener_resolves_to_a_callable(name: str) -> None:
    """An opener named by a stale import path (a module moved) fails here, not at a user's first run."""
    spec = registry.BACKENDS[name]
    if spec.opener is None:
        assert spec.artifact == registry.NO_ENGINE
        return
    module = spec.opener.partition(":")[0]
    import importlib.util

    assert importlib.util.find_spec(module) is not None, spec.opener
    # the GPU session modules import their libraries only when a session opens: importing is safe here
    assert callable(spec.factory())


def test_a_missing_requirement_is_named_with_its_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = replace(
        registry.BACKENDS["onnxruntime-cpu"],
        requires=(registry.Requirement("no_such_module_fasttts", "pip install no-such-thing"),),
    )
    assert not spec.available() and [r.module for r in spec.missing()] == ["no_such_module_fasttts"]
    with pytest.raises(MissingDependencyError, match="needs no_such_module_fasttts") as ei:
        spec.open(Path("x.onnx"), None)
    assert ei.value.hint == "pip install no-such-thing"
    # a module from another distribution: doctor says it is missing, opening leaves the provider check
    # to the session (ONNX Runtime names the providers it has)
    gpu_wheel = registry.Requirement("json", "pip install x", dist="no-such-dist-fasttts")
    assert gpu_wheel.importable() and not gpu_wheel.present()
    replace(spec, requires=(gpu_wheel,)).require("x.onnx")
    env = registry.Requirement("no_such_module_fasttts", "x", env="FASTTTS_TEST_PY")
    monkeypatch.setenv("FASTTTS_TEST_PY", sys.executable)
    assert env.present()  # an interpreter in the variable stands in for the module (TensorRT-LLM)


def test_preset_backend_validation_reads_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[components]\ngpt = { backend = "fake-cpu", precision = "fp32" }\n', encoding="utf-8")
    with pytest.raises(InputError, match="backend = 'fake-cpu'"):
        presets.parse_preset(path)
    fake = replace(registry.BACKENDS["onnxruntime-cpu"], name="fake-cpu")
    monkeypatch.setitem(registry.BACKENDS, "fake-cpu", fake)
    assert presets.parse_preset(path).components["gpt"].backend == "fake-cpu"


def test_doctor_has_one_row_per_backend() -> None:
    from fasttts_cli.app.doctor import OK, check_backends

    rows = {r.name: r for r in check_backends()}
    assert set(rows) == {f"backend {n}" for n in registry.BACKENDS}
    cpu = rows["backend onnxruntime-cpu"]
    assert cpu.status == OK and not cpu.required  # onnxruntime is a base dependency
    for r in rows.values():
        assert r.status == OK or r.fix, r  # what is not usable says how to get it


def _copy_engine(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_the_engine_opens_components_through_the_registry(
    tiny_engine_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend registered under a new name (here ONNX Runtime CPU behind a recording opener) runs a
    component with no other change: the manifest check accepts it and the engine opens it by name."""
    from fasttts_cli.indextts2.engine import IndexTTS2Engine

    opened: list[str] = []

    def recording(path: Path, options: object) -> object:
        from fasttts_cli.backends.onnxruntime.session import OrtSession

        opened.append(Path(path).name)
        return OrtSession(path, options)  # type: ignore[arg-type]

    monkeypatch.setattr(sys.modules[__name__], "recording_opener", recording, raising=False)
    fake = replace(
        registry.BACKENDS["onnxruntime-cpu"], name="fake-cpu", opener=f"{__name__}:recording_opener"
    )
    monkeypatch.setitem(registry.BACKENDS, "fake-cpu", fake)
    eng = _copy_engine(tiny_engine_dir, tmp_path / "eng")
    raw = json.loads((eng / "manifest.json").read_text(encoding="utf-8"))
    raw["components"]["campplus"]["backend"] = "fake-cpu"
    (eng / "manifest.json").write_text(json.dumps(raw), encoding="utf-8")
    e = IndexTTS2Engine.load(eng)
    e.session("campplus")
    e.session("bigvgan")
    assert opened == [raw["components"]["campplus"]["file"]]
    monkeypatch.delitem(registry.BACKENDS, "fake-cpu")
    with pytest.raises(EngineMismatchError, match="'campplus' backend 'fake-cpu'"):
        check_manifest(read_manifest(eng), eng)


def test_the_gpt_worker_folder_is_a_registry_component(tiny_engine_dir: Path) -> None:
    """The TensorRT-LLM GPT is checked like any component: by its backend's artifact (a folder)."""
    m = read_manifest(tiny_engine_dir)
    comps = dict(m.components)
    del comps["gpt_trunk"]
    file = m.components["campplus"].file  # a file, not the worker's folder
    comps["gpt_trtllm"] = replace(m.components["campplus"], backend="tensorrt")
    with pytest.raises(EngineMismatchError) as ei:
        check_manifest(replace(m, components=comps), tiny_engine_dir)
    msg = str(ei.value)
    assert "'gpt_trtllm' backend 'tensorrt' (runs: tensorrt-llm)" in msg
    assert f"folder {file!r} is missing" in msg and "gpt_trunk" not in msg


@pytest.mark.slow
def test_the_trtllm_gpt_opens_through_the_registry(
    ref_engine_dir: Path,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPT on TensorRT-LLM (its numpy reference worker here) is a session like any other: opened by
    its manifest backend's registry opener, stopped by the engine's close()."""
    from fasttts_cli.indextts2.engine import IndexTTS2Engine
    from fasttts_cli.indextts2.gpt_trtllm import TRTLLM_BACKEND_ENV, TrtllmGPT

    monkeypatch.setenv(TRTLLM_BACKEND_ENV, "reference")
    e = IndexTTS2Engine.load(ref_engine_dir)
    gpt = e.session("gpt_trtllm")
    assert isinstance(gpt, TrtllmGPT) and e.sessions.opened == {"gpt_trtllm": gpt}
    assert gpt.layout.n_mel == e.embeddings.mel_embedding.shape[0]
    e.close()
    assert e.sessions.opened == {}


@pytest.mark.slow
def test_a_trtllm_gpt_that_disagrees_with_the_tables_is_refused(
    ref_engine_dir: Path,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registry opener checks the worker's layout against what the engine hands it (the folder's
    tables, its conditioning rows) and stops the worker it refuses; nothing is left open."""
    from fasttts_cli.indextts2.engine import IndexTTS2Engine
    from fasttts_cli.indextts2.gpt_trtllm import TRTLLM_BACKEND_ENV, TrtllmGPT

    monkeypatch.setenv(TRTLLM_BACKEND_ENV, "reference")
    stopped: list[TrtllmGPT] = []
    close = TrtllmGPT.close
    monkeypatch.setattr(TrtllmGPT, "close", lambda self: (stopped.append(self), close(self))[1])
    e = IndexTTS2Engine.load(ref_engine_dir)
    try:
        e.manifest.config["gpt"]["num_latents"] += 1  # tables from a checkpoint with one more latent
        with pytest.raises(EngineMismatchError, match=r"conditioning rows; this engine folder's tables"):
            _ = e.trtllm
        assert len(stopped) == 1 and stopped[0].worker.proc.poll() is not None
        assert e.sessions.opened == {}
    finally:
        e.close()


def test_runtimes_group_the_backends() -> None:
    """The ONNX Runtime backends share graphs and their integer quantization (build/quantize.py and
    gpu_stack's options read this grouping instead of listing the backends)."""
    assert registry.of_runtime(registry.ONNXRUNTIME) == ("onnxruntime-cpu", "onnxruntime-cuda")
    assert {s.runtime for s in registry.BACKENDS.values()} == {
        registry.ONNXRUNTIME,
        registry.TENSORRT,
        registry.TENSORRT_LLM,
        registry.TORCH,
    }
    integer = {n for n, s in registry.BACKENDS.items() if {"int8", "int4"} & set(s.precisions)}
    assert integer == set(registry.of_runtime(registry.ONNXRUNTIME))
