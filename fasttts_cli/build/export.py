"""`fasttts build`: export an official checkpoint to a self-contained engine folder (ONNX per component).

Every component is exported with the legacy TorchScript exporter (`dynamo=False`, opset 17: on torch 2.13
it gives graphs that match PyTorch to ~1e-6 with dynamic batch and time axes, including an empty KV
cache), then verified at once: ONNX Runtime against the PyTorch module on random inputs of two shapes
other than the export example, relative error < 1e-4 (integer outputs exact), else the build fails.

Engine folder (DESIGN.md §3b): the `.onnx` components (`<name>.onnx.data` beside a graph over 2 GB), the
tokenizer, the host-side tables as `.npy` (GPT embedding and position tables, speed embedding, emotion
matrices, w2v-BERT stats) and `manifest.json` (preset build keys, io names and shapes, model constants).
The folder is assembled under a temporary name and renamed when complete. The graphs themselves are
described in graphs.py, the host tables and constants in host_files.py.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fasttts_cli import __version__
from fasttts_cli.build.graphs import (  # noqa: F401
    GraphSpec,
    engine_specs,
    graph_specs,
    inplace_trunk_fits,
    inplace_trunk_spec,
    ort_contrib_fits,
    trunk_spec,
)
from fasttts_cli.build.host_files import (  # noqa: F401
    BPE_MODEL,
    EMO_MATRIX,
    SPK_MATRIX,
    W2V_MEAN,
    W2V_VAR,
    gpt_host_tables,
    host_arrays,
    model_constants,
)
from fasttts_cli.build.onnx_io import EXTERNAL_DATA_BYTES, load_model, staged_folder, write_onnx
from fasttts_cli.build.quiet import quiet_native_output
from fasttts_cli.errors import FastTTSError, InputError, UsageError
from fasttts_cli.indextts2.text import TextFrontEnd
from fasttts_cli.nets.checkpoint import CheckpointPaths, IndexTTS2Modules, load_checkpoint
from fasttts_cli.spec.engine_folder import ComponentEntry, Manifest, component_sha256, write_manifest
from fasttts_cli.spec.presets import ComponentSpec, Preset, load_preset

OPSET = 17
VERIFY_REL = 1e-4
MODEL_ID = "indextts2"


class ExportError(FastTTSError):
    """A component failed to export or did not match its PyTorch module."""


# ------------------------------------------------------------------------------------------ export


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b64)
    return float(np.linalg.norm(a64 - b64) / (nb if nb > 0 else 1.0))


def export_graph(spec: GraphSpec, out_dir: Path, *, seed: int = 0) -> Path:
    """Export one component to `out_dir/<name>.onnx` (+ `.onnx.data` when large) and verify it."""
    g = torch.Generator().manual_seed(seed)
    example = spec.make_inputs(*spec.export_bt, g)
    path = out_dir / f"{spec.name}.onnx"
    spec.module.eval()
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's tracer warnings are expected noise
        raw = Path(tmp) / path.name
        try:
            with torch.no_grad(), quiet_native_output(f"the ONNX export of {spec.name}"):
                torch.onnx.export(
                    spec.module,
                    example,
                    str(raw),
                    input_names=spec.input_names,
                    output_names=spec.output_names,
                    dynamic_axes=spec.dynamic_axes,
                    opset_version=OPSET,
                    dynamo=False,
                    do_constant_folding=True,
                )
        except Exception as e:  # the exporter raises many types
            raise ExportError(f"export of component {spec.name!r} failed: {e}") from None
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        _finalize(raw, path, external=size > EXTERNAL_DATA_BYTES)
    verify_graph(spec, path, seed=seed + 1)
    return path


def _finalize(raw: Path, dest: Path, *, external: bool) -> None:
    """Move the exported graph into place; big graphs get all weights in one `<name>.onnx.data`."""
    if not external and not any(p != raw for p in raw.parent.iterdir()):
        os.replace(raw, dest)
        return
    write_onnx(load_model(raw), dest, external=external)


def verify_graph(spec: GraphSpec, path: Path, *, seed: int = 1, tolerance: float = VERIFY_REL) -> float:
    """ORT vs PyTorch on shapes other than the export example; returns the worst relative error.
    Raises ExportError when an output's relative error reaches `tolerance` (or is not finite), a shape
    differs, or an integer output differs at all (integer checks are skipped for tolerance inf)."""
    from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions

    sess = OrtSession(path, SessionOptions(graph_optimization="all"))
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for b, t in spec.verify_bt:
        inputs = spec.make_inputs(b, t, g)
        with torch.no_grad():
            ref = spec.module(*inputs)
        ref = ref if isinstance(ref, tuple | list) else (ref,)
        out = sess.run(
            spec.output_names, {n: x.numpy() for n, x in zip(spec.input_names, inputs, strict=True)}
        )
        for name, r in zip(spec.output_names, ref, strict=True):
            a, want = out[name], r.detach().numpy()
            if a.shape != want.shape:
                raise ExportError(
                    f"component {spec.name!r}: output {name} shape {a.shape}, PyTorch {want.shape}"
                )
            if np.issubdtype(want.dtype, np.integer):
                if tolerance != float("inf") and not np.array_equal(a, want):
                    raise ExportError(f"component {spec.name!r}: integer output {name} differs from PyTorch")
                continue
            err = _rel(a, want)
            worst = max(worst, err)
            if not np.isfinite(err) or not err < tolerance:
                raise ExportError(
                    f"component {spec.name!r}: output {name} differs from PyTorch at batch {b}, "
                    f"time {t}: relative error {err:.2e} >= {tolerance:g}"
                )
    return worst


def _io_shapes(path: Path) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def dims(vi: Any) -> list[Any]:
        return [d.dim_param if d.dim_param else int(d.dim_value) for d in vi.type.tensor_type.shape.dim]

    return (
        {i.name: dims(i) for i in model.graph.input},
        {o.name: dims(o) for o in model.graph.output},
    )


# ------------------------------------------------------------------------------------------ host files


# ------------------------------------------------------------------------------------------ build


def _check_preset(preset: Preset) -> None:
    """Backend/precision/option combinations (gpu_stack.check_preset), then what this builder makes."""
    from fasttts_cli.backends.gpu_stack import check_preset

    check_preset(preset)
    for name, spec in sorted(preset.components.items()):
        if spec.backend == "torch":
            raise UsageError(
                f"--preset {preset.name}: component {name} runs on the torch backend, which needs no engine",
                hint="pass the checkpoint directory itself as --engine with this preset",
            )
        if spec.backend == "tensorrt-llm":
            from fasttts_cli.build.trtllm_build import require_stack

            require_stack()


def _build_trtllm_gpt(
    m: Any,
    comp: ComponentSpec,
    preset: Preset,
    tmp: Path,
    say: Callable[[str], None],
    *,
    n_conds: int | None = None,
    text_in_prompt: bool = False,
) -> ComponentEntry:
    """The GPT of module set `m` as a TensorRT-LLM engine (trtllm_build.build_gpt); `n_conds` and
    `text_in_prompt` for IndexTTS-2.5 (default: v2's num_latents + 2 conditioning rows)."""
    from fasttts_cli.build.trtllm_build import GptSizes, build_gpt

    g = m.gpt.cfg
    sizes = GptSizes(
        heads=g.heads,
        n_conds=g.num_latents + 2 if n_conds is None else n_conds,
        text_in_prompt=text_in_prompt,
        start_mel=g.start_mel_token,
        stop_mel=g.stop_mel_token,
        start_text=g.start_text_token,
        stop_text=g.stop_text_token,
    )
    return build_gpt(m.paths.gpt, sizes, comp, preset.limits, tmp, say)


def measure_graph(spec: GraphSpec, path: Path, *, seed: int = 1) -> float | None:
    """Worst relative error of a converted (quantized / fp16) graph against the fp32 PyTorch module, on
    the verification shapes; None when ONNX Runtime's CPU provider cannot run the graph."""
    try:
        return verify_graph(spec, path, seed=seed, tolerance=float("inf"))
    except ExportError:
        raise
    except Exception:  # e.g. fp16 kernels the CPU provider lacks
        return None


def _convert(
    spec: GraphSpec, path: Path, comp: ComponentSpec, say: Callable[[str], None]
) -> tuple[Path, dict[str, Any]]:
    """Apply the preset's precision to an exported fp32 graph (quantize.apply_precision)."""
    from fasttts_cli.build.quantize import apply_precision

    dst = path.with_name(f"{spec.name}.{comp.precision}.onnx")
    say(f"converting {spec.name} to {comp.precision}")
    report = apply_precision(path, dst, comp)
    if report is None:
        return path, {}
    for old in (path, path.with_name(path.name + ".data")):
        old.unlink(missing_ok=True)
    # scalars only: per-node lists would bloat the manifest at full size
    summary = {k: (len(v) if isinstance(v, list | tuple | dict) else v) for k, v in report.items()}
    info: dict[str, Any] = {"precision": comp.precision, "conversion": summary}
    info["rel_error_vs_pytorch"] = measure_graph(spec, dst)
    return dst, info


# Which loaded module each graph exports (an IndexTTS2Modules attribute), so a full-size build can drop
# a module as soon as its last graph is written (the peak memory of a full-size build is ~12 GB).
_MODULE_OF = {
    "w2v_bert": "w2v_bert",
    "codec_quantize": "codec",
    "codec_vq2emb": "codec",
    "codec_decode": "codec",  # IndexTTS-2.5 (export25.py)
    "campplus": "campplus",
    "speaker_conditioner": "gpt",
    "emotion_conditioner": "gpt",
    "gpt_trunk": "gpt",
    "s2mel_content": "s2mel",
    "length_regulator": "s2mel",
    "dit_cfg_step": "s2mel",
    "bigvgan": "bigvgan",
}


def _release_unused(m: IndexTTS2Modules, pending: list[GraphSpec | None]) -> None:
    import gc

    needed = {_MODULE_OF.get(sp.name) for sp in pending if sp is not None}
    for attr in set(_MODULE_OF.values()) - needed:
        if getattr(m, attr) is not None:
            setattr(m, attr, None)
    gc.collect()


def is_v25(root: Path) -> bool:
    """Whether a checkpoint folder is IndexTTS-2.5's (release_layout25.detect_model_version); a folder
    that is neither goes the v2 way, whose loader names what is missing."""
    from fasttts_cli.nets.release_layout25 import MODEL_V25, detect_model_version

    try:
        return detect_model_version(root) == MODEL_V25
    except InputError:
        return False


def default_out_dir(checkpoint_dir: Path, preset_name: str) -> Path:
    from fasttts_cli.synth.engine_select import engines_root

    return engines_root() / f"{Path(checkpoint_dir).resolve().name}-{preset_name}"


@dataclass(frozen=True)
class ComponentBuilt:
    """One component of an engine build is written (for a caller's progress display)."""

    name: str  # the graph (or "gpt_trtllm") as the manifest names it
    index: int  # 1-based
    total: int
    seconds: float  # this component: export, conversion and any TensorRT plan


def build_engine(
    checkpoint: CheckpointPaths | Path | str,
    preset: Preset | str | Path,
    out_dir: Path | str | None = None,
    *,
    overwrite: bool = False,
    components: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    on_component: Callable[[ComponentBuilt], None] | None = None,
) -> Path:
    """Export every component of `checkpoint` into an engine folder; returns its path.

    `components` limits the export to some graph names (for tests); the manifest then lists only those.
    `progress` gets a message per step; `on_component` a ComponentBuilt as each component is written.
    """
    say = progress or (lambda _msg: None)
    built = on_component or (lambda _c: None)
    preset = preset if isinstance(preset, Preset) else load_preset(preset)
    paths = checkpoint if isinstance(checkpoint, CheckpointPaths) else CheckpointPaths(Path(checkpoint))
    if is_v25(paths.root):  # it checks the preset itself (2.5 refuses a TensorRT-LLM GPT first)
        from fasttts_cli.build.export25 import build_engine25

        return build_engine25(
            paths.root, preset, out_dir, overwrite=overwrite, progress=say, on_component=built
        )
    _check_preset(preset)
    out = Path(out_dir) if out_dir is not None else default_out_dir(paths.root, preset.name)
    if out.exists() and not overwrite:
        raise UsageError(f"--out {out}: already exists", hint="choose another folder or pass --overwrite")
    say(f"loading checkpoint {paths.root}")
    m = load_checkpoint(paths)
    # The tokenizer is copied, not exported: read it now, so a damaged bpe.model is exit 2 naming it here
    # rather than an engine folder that every dub then refuses.
    TextFrontEnd.load(m.bpe_model)
    with staged_folder(out) as tmp:
        entries: dict[str, ComponentEntry] = {}
        build_info: dict[str, Any] = {}
        trt_info: dict[str, Any] = {}
        constants = model_constants(m)
        arrays = host_arrays(m)  # before the loop, which releases each module once exported
        specs: list[GraphSpec | None] = [
            sp for sp in engine_specs(m, preset) if components is None or sp.name in components
        ]
        gpt_comp = preset.components.get("gpt")
        trtllm = gpt_comp is not None and gpt_comp.backend == "tensorrt-llm"
        if trtllm:
            # the GPT trunk becomes a TensorRT-LLM engine instead of an ONNX graph
            specs = [sp for sp in specs if sp is not None and sp.name != "gpt_trunk"]
        total = len(specs) + int(trtllm)
        if trtllm:
            assert gpt_comp is not None
            t_comp = time.monotonic()
            entries["gpt_trtllm"] = _build_trtllm_gpt(m, gpt_comp, preset, tmp, say)
            built(ComponentBuilt("gpt_trtllm", 1, total, time.monotonic() - t_comp))
        entries.update(
            export_components(specs, preset, tmp, say, built, constants, build_info, trt_info, m, int(trtllm))
        )
        if build_info:
            constants["build"] = build_info
        if trt_info:
            constants["tensorrt"] = trt_info
        say("hashing checkpoint")
        write_folder(
            tmp, MODEL_ID, m, preset, entries, constants, arrays, {"bpe_model": (m.bpe_model, BPE_MODEL)}
        )
    return out  # the caller reports where it went (the CLI said it twice when this did too)


def write_folder(
    tmp: Path,
    model_id: str,
    m: Any,
    preset: Preset,
    entries: dict[str, ComponentEntry],
    constants: dict[str, Any],
    arrays: dict[str, np.ndarray],
    copies: dict[str, tuple[Path, str]],
) -> None:
    """Everything of an engine folder besides its graphs: the host arrays (`.npy`), the copied files
    (manifest `files` key -> (source, name in the folder)) and manifest.json, for module set `m`."""
    files: dict[str, str] = {}
    for fname, arr in arrays.items():
        np.save(tmp / fname, arr, allow_pickle=False)
        files[Path(fname).stem] = fname
    for key, (src, name) in copies.items():
        shutil.copyfile(src, tmp / name)
        files[key] = name
    manifest = Manifest(
        model_id=model_id,
        model_version=m.config.version,
        checkpoint_digest=m.digest(),
        preset=preset.name,
        preset_build_keys=preset.build_keys(),
        components=entries,
        opset=OPSET,
        tool_version=f"fasttts {__version__}",
        files=files,
        config=constants,
        random_weights=m.random_weights,
    )
    write_manifest(tmp, manifest)
    for p in [tmp, *tmp.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)  # mkdtemp's 0700 is not meant for an engine


def export_components(
    specs: list[GraphSpec | None],
    preset: Preset,
    tmp: Path,
    say: Callable[[str], None],
    built: Callable[[ComponentBuilt], None],
    constants: dict[str, Any],
    build_info: dict[str, Any],
    trt_info: dict[str, Any],
    modules: Any,
    done_before: int = 0,
) -> dict[str, ComponentEntry]:
    """Export, convert (the preset's precision) and, for TensorRT, plan every graph of `specs` into
    `tmp`; the manifest entry of each by name. `build_info` / `trt_info` collect the conversion and plan
    reports; each module of `modules` is dropped once its last graph is written (`_MODULE_OF`)."""
    entries: dict[str, ComponentEntry] = {}
    total = len(specs) + done_before
    with torch.no_grad():
        for i, spec in enumerate(specs):
            assert spec is not None
            t_comp = time.monotonic()
            say(f"exporting {spec.name}")
            path = export_graph(spec, tmp)
            comp = preset.components.get(spec.group) or ComponentSpec()
            if comp.precision != "fp32":
                path, build_info[spec.name] = _convert(spec, path, comp, say)
            ins, outs = _io_shapes(path)
            entry = ComponentEntry(
                file=path.name,
                backend="onnxruntime-cpu" if comp.backend == "tensorrt" else comp.backend,
                precision=comp.precision,
                inputs=ins,
                outputs=outs,
                sha256=component_sha256(path),
            )
            if comp.backend == "tensorrt":
                from fasttts_cli.build.tensorrt_build import build_component

                say(f"building TensorRT plan for {spec.name}")
                entry, info = build_component(tmp, spec.name, entry, comp, preset.limits, constants)
                trt_info[spec.name] = info.to_json()
            entries[spec.name] = entry
            built(ComponentBuilt(spec.name, i + 1 + done_before, total, time.monotonic() - t_comp))
            specs[i] = None
            _release_unused(modules, specs)
    return entries
