"""The IndexTTS-2 engine folder's contract: component names, the IO this runtime feeds and reads, the
config keys and host files it needs, and `check_manifest`, which refuses a folder that breaks it.

Which backends may run a component comes from the backend registry (`spec.registry`): a graph
component (ONNX model or TensorRT plan, IO names checked) on any backend whose artifact is a graph, the
GPT as a worker folder on a backend whose artifact is a folder (TensorRT-LLM).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.errors import EngineMismatchError, UsageError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import emotion as emo
from fasttts_cli.indextts2.decode_inplace import inplace_inputs
from fasttts_cli.indextts2.gpt_trtllm import GPT_TRTLLM
from fasttts_cli.spec import registry
from fasttts_cli.spec.engine_folder import ComponentEntry, Manifest, check_preset_matches
from fasttts_cli.spec.presets import Preset, load_preset

MODEL_ID = "indextts2"
SUPPORTED_MODEL_VERSIONS = ("2", "2.0")

# Component graph names (export.py's `graph_specs`) and the IO names this runtime feeds and reads.
W2V_BERT = "w2v_bert"
CODEC_QUANTIZE = "codec_quantize"
CODEC_VQ2EMB = "codec_vq2emb"
CAMPPLUS = "campplus"
SPEAKER_CONDITIONER = "speaker_conditioner"
EMOTION_CONDITIONER = "emotion_conditioner"
# A voice's preparation is two independent chains, the speaker's (w2v-BERT, conditioner, codec, mel,
# length regulator) and the emotion reference's (w2v-BERT, emotion conditioner; CAMPPlus, which needs
# only the audio, rides along to even the two out). On the CPU they run side by side, each of these
# sessions on half the threads: at the reference's ~200 frames the GEMMs scale
# poorly past one thread per chain (both w2v-BERT passes: 1.86-1.88 s side by side on 1 + 1 threads
# against 2.07-2.18 s one after the other on 2, same outputs).
VOICE_CHAIN_SESSIONS = (W2V_BERT, SPEAKER_CONDITIONER, EMOTION_CONDITIONER)
GPT_TRUNK = "gpt_trunk"
S2MEL_CONTENT = "s2mel_content"
LENGTH_REGULATOR = "length_regulator"
DIT_CFG_STEP = "dit_cfg_step"
VOCODER = "bigvgan"

IO = tuple[tuple[str, ...], tuple[str, ...]]

_FIXED_IO: dict[str, IO] = {
    W2V_BERT: (("input_features", "attention_mask"), ("spk_cond_emb",)),
    CODEC_QUANTIZE: (("features", "mask"), ("indices", "quantized")),
    CODEC_VQ2EMB: (("codes",), ("embedding",)),
    CAMPPLUS: (("fbank",), ("style",)),
    SPEAKER_CONDITIONER: (("features", "lengths"), ("latents",)),
    EMOTION_CONDITIONER: (("features", "lengths"), ("emovec",)),
    S2MEL_CONTENT: (("latent", "vq_emb", "code_lens", "ylens"), ("cond",)),
    LENGTH_REGULATOR: (("x", "x_lens", "y_lens"), ("y",)),
    DIT_CFG_STEP: (("x", "prompt_x", "x_lens", "t", "style", "mu", "cfg_rate", "prompt_lens"), ("v",)),
    VOCODER: (("mel", "lengths"), ("wav",)),
}

# s2mel_content as engines built before it took its target frames had it: floor(1.72 n) inside the graph,
# `ylens` an output. Such an engine still speaks at the natural length; it cannot render to a length.
S2MEL_TARGET = "ylens"
_S2MEL_CONTENT_FIXED_LENGTH: IO = (("latent", "vq_emb", "code_lens"), ("cond", "ylens"))

# The forms the GPT comes in, first match wins: a TensorRT-LLM build replaces the trunk graph by the
# worker's folder. Each names the registry artifact kind its backend must make.
GPT_FORMS: dict[str, str] = {GPT_TRTLLM: registry.FOLDER, GPT_TRUNK: registry.GRAPH}

# Host-side arrays (manifest `files` keys) besides the GPT tables of decode.TABLE_FILES.
W2V_MEAN, W2V_VAR, SPK_MATRIX, EMO_MATRIX, BPE_MODEL = (
    "w2v_stat_mean",
    "w2v_stat_var",
    "spk_matrix",
    "emo_matrix",
    "bpe_model",
)

_CONFIG_KEYS = {
    "gpt": ("model_dim", "layers", "heads", "max_mel_tokens", "max_text_tokens", "start_mel_token"),
    "s2mel": ("sr", "n_fft", "win_length", "hop_length", "n_mels", "style_dim", "code_to_frames"),
    "vocoder": ("hop", "sampling_rate"),
}


def gpt_component(components: Mapping[str, ComponentEntry]) -> str:
    """The manifest component that runs this engine's GPT (see GPT_FORMS)."""
    return next((name for name in GPT_FORMS if name in components), GPT_TRUNK)


def runtime_components(gpt: str = GPT_TRUNK) -> tuple[str, ...]:
    """Every component this runtime opens, with the GPT in form `gpt`."""
    return (*_FIXED_IO, gpt)


def artifact(name: str) -> str:
    """The registry artifact kind of a component: the GPT form's, else a graph."""
    return GPT_FORMS.get(name, registry.GRAPH)


def required_io(layers: int) -> dict[str, IO]:
    """Every graph session this runtime drives, with the input and output names it uses."""
    io = dict(_FIXED_IO)
    io[GPT_TRUNK] = (
        (dec.INPUTS_EMBEDS, dec.ATTENTION_MASK, *dec.past_names(layers)),
        (dec.LOGITS, dec.HIDDEN, *dec.present_names(layers)),
    )
    return io


def io_matches(name: str, layers: int, inputs: set[str], outputs: set[str] | None = None) -> bool:
    """A component's input names equal, and its outputs include, what this runtime uses. The GPT trunk
    comes in two forms: the classic one (past/present concatenated) and the in-place one
    (decode_inplace.py), which ONNX Runtime CPU engines get; s2mel_content may be the fixed-length form
    of older engines (`takes_target_frames` tells them apart)."""
    ins, outs = required_io(layers)[name]
    forms: list[tuple[Sequence[str], Sequence[str]]] = [(ins, outs)]
    if name == GPT_TRUNK:
        forms.append((inplace_inputs(layers), outs))
    if name == S2MEL_CONTENT:
        forms.append(_S2MEL_CONTENT_FIXED_LENGTH)
    return any(inputs == set(i) and (outputs is None or set(o) <= outputs) for i, o in forms)


def takes_target_frames(s2mel_content_inputs: set[str]) -> bool:
    """Whether an s2mel_content graph with these inputs renders to given target frames (see S2MEL_TARGET)."""
    return S2MEL_TARGET in s2mel_content_inputs


def built_for_target_frames(manifest: Manifest) -> bool:
    """Whether an engine folder's s2mel_content takes its target frames, from the manifest alone (a
    folder built before it did still runs, at the natural length: a cache of built engines rebuilds it)."""
    comp = manifest.components.get(S2MEL_CONTENT)
    return comp is not None and takes_target_frames(set(comp.inputs))


def components_problems(
    names: Sequence[str],
    manifest: Manifest,
    layers: int,
    folder: Path,
    matches: Callable[[str, int, set[str], set[str] | None], bool] = io_matches,
) -> list[str]:
    """What is wrong with the manifest's components `names` (missing; a backend that cannot run its
    artifact kind; a worker folder absent; graph IO that `matches` refuses), one message each."""
    problems: list[str] = []
    for name in names:
        comp = manifest.components.get(name)
        if comp is None:
            problems.append(f"component {name!r} is missing")
            continue
        kind = artifact(name)
        runs = registry.with_artifact(kind)
        if comp.backend not in runs:
            problems.append(f"component {name!r} backend {comp.backend!r} (runs: {', '.join(runs)})")
        if kind == registry.FOLDER:
            if not (folder / comp.file).is_dir():
                problems.append(f"component {name!r}: folder {comp.file!r} is missing")
            continue  # a worker folder has no IO names to check
        outs_have = set(comp.outputs) if comp.outputs else None
        if comp.inputs and not matches(name, layers, set(comp.inputs), outs_have):
            want = required_io(layers).get(name)
            expected = f", expected {sorted(want[0])} / {sorted(want[1])}" if want else ""
            problems.append(
                f"component {name!r} inputs {sorted(comp.inputs)} / outputs {sorted(comp.outputs)}{expected}"
            )
    return problems


def config_problems(cfg: Mapping[str, Any], keys: Mapping[str, Sequence[str]]) -> list[str]:
    """What the manifest's `config` lacks of `keys` (section -> keys), one message each."""
    problems: list[str] = []
    for section, names in keys.items():
        sec = cfg.get(section)
        if not isinstance(sec, Mapping):
            problems.append(f"config.{section} is missing")
            continue
        problems += [f"config.{section}.{k} is missing" for k in names if k not in sec]
    return problems


def check_manifest(manifest: Manifest, folder: Path) -> None:
    """Refuse an engine this runtime cannot drive; the message names every mismatch."""
    problems: list[str] = []
    if str(manifest.model_version) not in SUPPORTED_MODEL_VERSIONS:
        problems.append(
            f"model_version {manifest.model_version!r} "
            f"(this runtime runs {', '.join(SUPPORTED_MODEL_VERSIONS)})"
        )
    cfg = manifest.config or {}
    problems += config_problems(cfg, _CONFIG_KEYS)
    if problems:
        raise EngineMismatchError(f"{folder / 'manifest.json'}: " + "; ".join(problems))
    layers = int(cfg["gpt"]["layers"])
    problems += components_problems(
        runtime_components(gpt_component(manifest.components)), manifest, layers, folder
    )
    needed = [Path(f).stem for f in dec.TABLE_FILES.values()] + [
        W2V_MEAN,
        W2V_VAR,
        SPK_MATRIX,
        EMO_MATRIX,
        BPE_MODEL,
    ]
    problems += [f"file {k!r} is not listed" for k in needed if k not in manifest.files]
    refuse_mismatch(folder, "IndexTTS-2", problems)


def refuse_mismatch(folder: Path, runtime: str, problems: list[str]) -> None:
    """EngineMismatchError listing every way the engine folder differs from what `runtime` runs."""
    if problems:
        raise EngineMismatchError(
            f"{folder / 'manifest.json'}: this engine does not match the {runtime} runtime: "
            + "; ".join(problems),
            hint="rebuild it with this version of `fasttts build`",
        )


def resolve_preset(manifest: Manifest, preset: Preset | str | Path | None, folder: Path) -> Preset:
    """The run-time preset: the given one (its build keys must equal the engine's), else the engine's own."""
    if preset is None:
        try:
            p = load_preset(manifest.preset)
        except UsageError:
            # A preset file that is not shipped: the engine's build keys stand, run keys take defaults.
            return Preset(name=manifest.preset)
    else:
        p = preset if isinstance(preset, Preset) else load_preset(preset)
    check_preset_matches(manifest, p.name, p.build_keys(), folder)
    return p


def load_text_front_end(folder: Path, manifest: Manifest, preset: Preset | None = None) -> Any:
    """The tokenizer + segmenter from the engine folder alone (no sessions)."""
    from fasttts_cli.indextts2.text import TextFrontEnd

    limit = int(manifest.config["gpt"]["max_text_tokens"])
    if preset is not None:
        limit = min(limit, int(preset.limits.max_text_tokens))
    return TextFrontEnd.load(folder / manifest.files[BPE_MODEL], max_text_tokens=limit)


def gpt_tokens(g: Mapping[str, Any]) -> dec.GPTTokens:
    """The GPT's special tokens from the manifest's `config.gpt` (the original's defaults where absent)."""
    return dec.GPTTokens(
        start_text=int(g.get("start_text_token", 0)),
        stop_text=int(g.get("stop_text_token", 1)),
        start_mel=int(g["start_mel_token"]),
        stop_mel=int(g.get("stop_mel_token", int(g["start_mel_token"]) + 1)),
    )


def emotion_matrices(folder: Path, manifest: Manifest) -> emo.EmotionMatrices:
    """feat1 / feat2 from the folder's .npy files, split by `config.emo_num`."""
    counts = tuple(int(x) for x in manifest.config.get("emo_num", emo.EMO_NUM))
    spk, em = (
        np.load(folder / manifest.files[k], allow_pickle=False).astype(np.float32)
        for k in (SPK_MATRIX, EMO_MATRIX)
    )
    return emo.EmotionMatrices(spk=spk, emo=em, counts=counts)
