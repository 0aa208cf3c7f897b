"""IndexTTS-2 engine: the stage API over an engine folder's sessions (numpy + ONNX Runtime, never torch).

`IndexTTS2Engine.load(folder)` reads the manifest (and nothing outside the folder), refuses an engine this
runtime cannot drive with a message naming what differs, and opens each component lazily, so a caller
that only needs the tokenizer pays for nothing else. Every stage takes explicit arrays and returns arrays,
so each can be compared with the original implementation on its own (stage numbers as in
../shared/parity/README.md):

    speaker_audio / emotion_audio        1.1 / 1.8   file -> waveforms at the model rates
    w2v_bert                             1.2-1.3     16 kHz audio -> normalised layer-17 features (T, 1024)
    codec_quantize                       1.4         features -> (codes, S_ref)
    ref_mel, style                       1.5, 1.6    prompt mel (80, Tm), CAMPPlus style (192,)
    prompt_condition                     1.7         S_ref -> (Tm, C)
    speaker_conditioning                 3.2         features -> speaker latents (32, D)
    emotion_vector(_mode)                3.1, 3.3    emovec (D,)
    prefix                               3.4         (P, D)
    generate                             3.5 + sampling   codes per line (batched, per-line generators)
    latent                               3.7         (n, D) per line
    s2mel_content                        4.1         cond (B, Tg, C), ylens
    cfm                                  4.4         Euler CFM with batched CFG, start noise injected
    vocode                               5           wavs, cropped per row

Composite helpers (`features`, `voice_conditioning`, `codes_to_wavs`) chain them for the synthesizer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.protocol import GPTSteps
from fasttts_cli.engine_folder import Manifest, check_preset_matches, read_manifest
from fasttts_cli.errors import EngineMismatchError, UsageError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import emotion as emo
from fasttts_cli.indextts2 import features as feat
from fasttts_cli.indextts2 import generate_loop
from fasttts_cli.indextts2.decode_inplace import InplaceGPTDecoder, decoder_for, inplace_inputs
from fasttts_cli.indextts2.generate_loop import NoStopDecoder, line_decoders
from fasttts_cli.indextts2.gpt_trtllm import GPT_TRTLLM, LinePrompt, TrtllmGPT, worker_dir
from fasttts_cli.indextts2.sampling import Decoded, SamplingParams
from fasttts_cli.indextts2.sessions import Session, SessionOptions, open_session
from fasttts_cli.presets import INTEGER_PRECISIONS, Preset, load_preset
from fasttts_cli.s2mel_cache.schedules import euler_times

MODEL_ID = "indextts2"
SUPPORTED_MODEL_VERSIONS = ("2", "2.0")
SUPPORTED_BACKENDS = ("onnxruntime-cpu", "onnxruntime-cuda", "tensorrt")

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

_FIXED_IO: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    W2V_BERT: (("input_features", "attention_mask"), ("spk_cond_emb",)),
    CODEC_QUANTIZE: (("features", "mask"), ("indices", "quantized")),
    CODEC_VQ2EMB: (("codes",), ("embedding",)),
    CAMPPLUS: (("fbank",), ("style",)),
    SPEAKER_CONDITIONER: (("features", "lengths"), ("latents",)),
    EMOTION_CONDITIONER: (("features", "lengths"), ("emovec",)),
    S2MEL_CONTENT: (("latent", "vq_emb", "code_lens"), ("cond", "ylens")),
    LENGTH_REGULATOR: (("x", "x_lens", "y_lens"), ("y",)),
    DIT_CFG_STEP: (("x", "prompt_x", "x_lens", "t", "style", "mu", "cfg_rate", "prompt_lens"), ("v",)),
    VOCODER: (("mel", "lengths"), ("wav",)),
}

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


def required_io(
    layers: int, *, trtllm_gpt: bool = False
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every session this runtime drives, with the input and output names it uses. With the GPT on
    TensorRT-LLM (`trtllm_gpt`), the trunk is the worker's engine, not a session."""
    io = dict(_FIXED_IO)
    if trtllm_gpt:
        return io
    io[GPT_TRUNK] = (
        (dec.INPUTS_EMBEDS, dec.ATTENTION_MASK, *dec.past_names(layers)),
        (dec.LOGITS, dec.HIDDEN, *dec.present_names(layers)),
    )
    return io


def io_matches(name: str, layers: int, inputs: set[str], outputs: set[str] | None = None) -> bool:
    """A component's input names equal, and its outputs include, what this runtime uses. The GPT trunk
    comes in two forms: the classic one (past/present concatenated) and the in-place one
    (decode_inplace.py), which ONNX Runtime CPU engines get."""
    ins, outs = required_io(layers)[name]
    forms = [set(ins)]
    if name == GPT_TRUNK:
        forms.append(set(inplace_inputs(layers)))
    return inputs in forms and (outputs is None or set(outs) <= outputs)


# --------------------------------------------------------------------------------------- data at seams


@dataclass
class SpeakerFeatures:
    """Stages 1.1-1.7 of one speaker reference."""

    spk_cond_emb: np.ndarray  # (T, 1024) normalised w2v-BERT layer-17 features
    s_ref: np.ndarray  # (T, 1024) codec-quantized features
    ref_mel: np.ndarray  # (n_mels, Tm) CFM prompt
    style: np.ndarray  # (style_dim,) CAMPPlus
    prompt_condition: np.ndarray  # (Tm, C) length regulator of S_ref to Tm frames


@dataclass
class VoiceConditioning:
    """Everything synthesis needs from a reference voice (+ emotion); what the voice cache stores."""

    spk_latents: np.ndarray  # (num_latents, D) speaker perceiver output, before the emovec is added
    emovec: np.ndarray  # (D,) the emotion vector the GPT gets
    style: np.ndarray  # (style_dim,)
    ref_mel: np.ndarray  # (n_mels, Tm)
    prompt_condition: np.ndarray  # (Tm, C)

    FIELDS = ("spk_latents", "emovec", "style", "ref_mel", "prompt_condition")

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(getattr(self, k), dtype=np.float32) for k in self.FIELDS}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> VoiceConditioning:
        missing = [k for k in cls.FIELDS if k not in arrays]
        if missing:
            raise KeyError(f"voice conditioning lacks {', '.join(missing)}")
        return cls(**{k: np.asarray(arrays[k], dtype=np.float32) for k in cls.FIELDS})


@dataclass
class CFMInputs:
    """One batch of rows for `cfm`, padded to the longest row (built by `cfm_inputs`)."""

    cat_condition: np.ndarray  # (B, T, C) [prompt condition | content] per row
    x_lens: np.ndarray  # (B,) int64 Tm_b + Tg_b
    prompt: np.ndarray  # (B, n_mels, Tp) ref mels, valid up to prompt_lens
    prompt_lens: np.ndarray  # (B,) int64 Tm_b
    style: np.ndarray  # (B, style_dim)


@dataclass
class StageTimes:
    """Wall time per stage (seconds, summed over calls) and call counts; the bench reads these. Stages
    that run side by side (a voice's two chains) each count their own wall time."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @contextmanager
    def time(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            with self._lock:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + dt
                self.calls[stage] = self.calls.get(stage, 0) + 1

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


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


# A line's GPT input as `IndexTTS2Engine.prefix` makes it: the embedded prefix for the ONNX trunk, or
# the conditioning rows + text ids for the TensorRT-LLM worker.
GPTPrompt = np.ndarray | LinePrompt


def _gpt_kind(manifest: Manifest) -> type[dec.GPTDecoder] | type[TrtllmGPT]:
    """The GPT step backend an engine folder's manifest names: the TensorRT-LLM worker when the folder
    has that component, else the ONNX trunk (decode_inplace.decoder_for picks its form)."""
    return TrtllmGPT if GPT_TRTLLM in manifest.components else dec.GPTDecoder


def _own_prompts(gpt: GPTSteps, prefixes: Sequence[GPTPrompt]) -> list[GPTPrompt]:
    """The prompts, refused unless of the kind this engine's GPT makes (its own prefix())."""
    want = LinePrompt if isinstance(gpt, TrtllmGPT) else np.ndarray
    if not all(isinstance(p, want) for p in prefixes):
        raise TypeError(
            f"this engine's GPT takes {want.__name__} prompts: pass the ones its own prefix() made"
        )
    return list(prefixes)


def _pad_stack(rows: Sequence[np.ndarray], axis: int = 0, value: float = 0.0) -> np.ndarray:
    """Stack arrays that differ in length along `axis` (right-padded with `value`) into (B, ...)."""
    n = max(r.shape[axis] for r in rows)
    out = []
    for r in rows:
        pad = [(0, 0)] * r.ndim
        pad[axis] = (0, n - r.shape[axis])
        out.append(np.pad(r, pad, constant_values=value))
    return np.stack(out)


# ---------------------------------------------------------------------------------------------- engine


class IndexTTS2Engine:
    """The stage API over one engine folder. Sessions open on first use (`open_all` to force)."""

    def __init__(
        self, folder: Path, manifest: Manifest, preset: Preset, options: SessionOptions | None = None
    ) -> None:
        self.folder = folder
        self.manifest = manifest
        self.preset = preset
        self.options = options or SessionOptions()
        self.times = StageTimes()
        cfg = manifest.config
        g = cfg["gpt"]
        self.layers, self.heads, self.model_dim = int(g["layers"]), int(g["heads"]), int(g["model_dim"])
        s2 = cfg["s2mel"]
        self.mel_params = feat.MelParams(
            sr=int(s2["sr"]),
            n_fft=int(s2["n_fft"]),
            win_length=int(s2["win_length"]),
            hop_length=int(s2["hop_length"]),
            n_mels=int(s2["n_mels"]),
            fmin=float(s2.get("fmin") or 0.0),
            fmax=None if s2.get("fmax") in (None, "None") else float(s2["fmax"]),
        )
        self.code_to_frames = float(s2["code_to_frames"])
        self.hop = int(cfg["vocoder"]["hop"])
        self.sample_rate = int(cfg["vocoder"]["sampling_rate"])
        self.tokens = dec.GPTTokens(
            start_text=int(g.get("start_text_token", 0)),
            stop_text=int(g.get("stop_text_token", 1)),
            start_mel=int(g["start_mel_token"]),
            stop_mel=int(g.get("stop_mel_token", int(g["start_mel_token"]) + 1)),
        )
        self.emo_num = tuple(int(x) for x in cfg.get("emo_num", emo.EMO_NUM))
        self._sessions: dict[str, Session] = {}
        self._emb: dec.HostEmbeddings | None = None
        self._decoder: dec.GPTDecoder | InplaceGPTDecoder | None = None
        self._trtllm: TrtllmGPT | None = None
        self.trtllm_gpt = GPT_TRTLLM in manifest.components
        self._mats: emo.EmotionMatrices | None = None
        self._text: Any = None
        self._cfm_cache: dict[tuple[int, float, str, str], Any] = {}
        self._voice_side: ThreadPoolExecutor | None = None
        self._open_lock = threading.Lock()

    # ------------------------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        engine_dir: Path | str,
        preset: Preset | str | Path | None = None,
        threads: int | None = None,
    ) -> IndexTTS2Engine:
        folder = Path(engine_dir)
        manifest = read_manifest(folder, expect_model=MODEL_ID)
        check_manifest(manifest, folder)
        p = resolve_preset(manifest, preset, folder)
        return cls(folder, manifest, p, SessionOptions(threads=threads))

    def identity(self) -> str:
        return self.manifest.identity()

    def session(self, name: str) -> Session:
        s = self._sessions.get(name)
        if s is not None:
            return s
        with self._open_lock:  # a voice's two chains may ask for the same session at once
            s = self._sessions.get(name)
            return s if s is not None else self._open(name)

    def _open(self, name: str) -> Session:
        comp = self.manifest.components[name]
        opts = self.options
        if name == GPT_TRUNK:
            # the trunk runs back to back (one call per generated token): its workers may keep spinning
            opts = replace(opts, spin_after_run=True)
        elif name in VOICE_CHAIN_SESSIONS and self.voice_chains_side_by_side:
            opts = replace(opts, threads=max(1, opts.resolved_threads() // 2))
        s = open_session(self.folder / comp.file, comp.backend, opts)
        want_in, want_out = required_io(self.layers, trtllm_gpt=self.trtllm_gpt)[name]
        have_in = {i.name for i in s.inputs}
        have_out = {o.name for o in s.outputs}
        if not io_matches(name, self.layers, have_in, have_out):
            raise EngineMismatchError(
                f"{self.folder / comp.file}: component {name!r} has inputs {sorted(have_in)} and "
                f"outputs {sorted(have_out)}; this runtime feeds {list(want_in)} and reads "
                f"{list(want_out)}",
                hint="rebuild the engine with this version of `fasttts build`",
            )
        self._sessions[name] = s
        return s

    @property
    def voice_chains_side_by_side(self) -> bool:
        """Whether a voice's speaker and emotion chains run concurrently (CPU sessions, >= 2 threads)."""
        cpu = all(
            self.manifest.components[n].backend == "onnxruntime-cpu"
            for n in VOICE_CHAIN_SESSIONS
            if n in self.manifest.components
        )
        return cpu and self.options.resolved_threads() >= 2

    def open_all(self) -> None:
        for name in required_io(self.layers, trtllm_gpt=self.trtllm_gpt):
            self.session(name)

    def file(self, key: str) -> Path:
        return self.folder / self.manifest.files[key]

    @property
    def text(self) -> Any:
        """The TextFrontEnd (tokenizer + segmenter) from the engine's own bpe.model."""
        if self._text is None:
            self._text = load_text_front_end(self.folder, self.manifest, self.preset)
        return self._text

    @property
    def embeddings(self) -> dec.HostEmbeddings:
        if self._emb is None:
            arrays = {
                k: np.load(self.file(Path(f).stem), allow_pickle=False).astype(np.float32)
                for k, f in dec.TABLE_FILES.items()
            }
            self._emb = dec.HostEmbeddings(**arrays, tokens=self.tokens)
        return self._emb

    @property
    def decoder(self) -> GPTSteps:
        """The GPT step backend the generate loop drives, picked once from the manifest: the worker on
        TensorRT-LLM when the folder has that component, else the ONNX trunk (in place when it can)."""
        if self._decoder is None:
            if _gpt_kind(self.manifest) is TrtllmGPT:
                self._decoder = self.trtllm
            else:
                self._decoder = decoder_for(
                    self.session(GPT_TRUNK), self.embeddings, layers=self.layers, heads=self.heads
                )
        return self._decoder

    @property
    def trtllm(self) -> TrtllmGPT:
        """The GPT on TensorRT-LLM: a worker process over the folder's `gpt_trtllm/` (gpt_trtllm.py)."""
        if self._trtllm is None:
            path, backend = worker_dir(self.folder / self.manifest.components[GPT_TRTLLM].file)
            self._trtllm = TrtllmGPT(path, backend=backend, emb=self.embeddings)
            lay = self._trtllm.layout
            n_latents = int(self.manifest.config["gpt"]["num_latents"])
            want = (self.embeddings.mel_embedding.shape[0], n_latents + 2)
            if (lay.n_mel, lay.n_conds) != want:
                self.close()
                raise EngineMismatchError(
                    f"{path}: the TensorRT-LLM GPT has {lay.n_mel} mel codes and {lay.n_conds} conditioning "
                    f"rows; this engine folder's tables have {want[0]} and {want[1]}",
                    hint="rebuild the engine folder with one `fasttts build`",
                )
        return self._trtllm

    @property
    def emotion_matrices(self) -> emo.EmotionMatrices:
        if self._mats is None:
            self._mats = emo.EmotionMatrices(
                spk=np.load(self.file(SPK_MATRIX), allow_pickle=False).astype(np.float32),
                emo=np.load(self.file(EMO_MATRIX), allow_pickle=False).astype(np.float32),
                counts=self.emo_num,
            )
        return self._mats

    @property
    def max_codes(self) -> int:
        """Most codes one segment can have (mel position table), whatever the preset asks."""
        return self.embeddings.max_codes

    def close(self) -> None:
        if self._voice_side is not None:
            self._voice_side.shutdown(wait=True)
            self._voice_side = None
        self._sessions.clear()
        self._decoder = None
        if self._trtllm is not None:
            self._trtllm.close()
            self._trtllm = None

    # ------------------------------------------------------------------------------- stage 1: audio

    def speaker_audio(self, path: Path | str) -> feat.SpeakerAudio:
        """Stage 1.1: 22.05 kHz (soxr HQ, cut to the preset's max_ref_seconds) and 16 kHz (sinc)."""
        return feat.load_speaker_audio(path, self.preset.limits.max_ref_seconds)

    def emotion_audio(self, path: Path | str) -> np.ndarray:
        """Stage 1.8: the emotion path loads straight to 16 kHz (not via 22.05 kHz)."""
        return feat.load_emotion_audio(path, self.preset.limits.max_ref_seconds)

    def w2v_bert(self, audio_16k: np.ndarray) -> np.ndarray:
        """Stages 1.2-1.3: (T, 1024) normalised hidden_states[17] of one 16 kHz waveform."""
        with self.times.time("w2v_bert"):
            x, mask = feat.w2v_bert_features(audio_16k)
            out = self.session(W2V_BERT).run(["spk_cond_emb"], {"input_features": x, "attention_mask": mask})
        return out["spk_cond_emb"][0, : int(mask[0].sum())]

    def codec_quantize(self, spk_cond_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage 1.4: (codes (T,), S_ref (T, 1024))."""
        x = np.asarray(spk_cond_emb, np.float32)[None]
        out = self.session(CODEC_QUANTIZE).run(
            ["indices", "quantized"], {"features": x, "mask": np.ones(x.shape[:2], np.int64)}
        )
        return out["indices"][0], out["quantized"][0]

    def ref_mel(self, audio_22k: np.ndarray) -> np.ndarray:
        """Stage 1.5: (n_mels, floor(N / hop)) log-mel, the CFM prompt."""
        return feat.log_mel(audio_22k, self.mel_params)

    def style(self, audio_16k: np.ndarray) -> np.ndarray:
        """Stage 1.6: CAMPPlus style (style_dim,) from the mean-normalised Kaldi fbank."""
        with self.times.time("speaker_features"):
            _, fbank = feat.campplus_fbank(audio_16k)
            return self.session(CAMPPLUS).run(["style"], {"fbank": fbank[None]})["style"][0]

    def length_regulator(self, x: np.ndarray, y_len: int) -> np.ndarray:
        """Stage 1.7 (prompt condition): (T, 1024) -> (y_len, C), nearest upsampling + conv stack."""
        x = np.asarray(x, np.float32)[None]
        out = self.session(LENGTH_REGULATOR).run(
            ["y"],
            {"x": x, "x_lens": np.array([x.shape[1]], np.int64), "y_lens": np.array([y_len], np.int64)},
        )
        return out["y"][0]

    def features(self, audio: feat.SpeakerAudio) -> SpeakerFeatures:
        """Stages 1.2-1.7 for a speaker reference."""
        spk = self.w2v_bert(audio.audio_16k)
        s_ref, mel, prompt = self._prompt_features(audio, spk)
        return SpeakerFeatures(spk, s_ref, mel, self.style(audio.audio_16k), prompt)

    def _prompt_features(
        self, audio: feat.SpeakerAudio, spk_cond_emb: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(S_ref, ref_mel, prompt_condition): the CFM prompt side of a speaker reference."""
        with self.times.time("speaker_features"):
            _, s_ref = self.codec_quantize(spk_cond_emb)
            mel = self.ref_mel(audio.audio_22k)
            return s_ref, mel, self.length_regulator(s_ref, mel.shape[1])

    # ------------------------------------------------------------------------------- stage 3: GPT

    def _cond_lengths(self, t: int, width: int) -> np.ndarray:
        # The original passes the feature width (1024) as the length: nothing is masked for T <= 1024.
        return np.array([min(t, width)], np.int64)

    def speaker_conditioning(self, spk_cond_emb: np.ndarray) -> np.ndarray:
        """Stage 3.2: (T, 1024) -> speaker latents (num_latents, D)."""
        x = np.asarray(spk_cond_emb, np.float32)
        with self.times.time("conditioners"):
            out = self.session(SPEAKER_CONDITIONER).run(
                ["latents"], {"features": x[None], "lengths": self._cond_lengths(*x.shape)}
            )
        return out["latents"][0]

    def emovec_of(self, cond_emb: np.ndarray) -> np.ndarray:
        """get_emovec: (T, 1024) -> (D,)."""
        x = np.asarray(cond_emb, np.float32)
        with self.times.time("conditioners"):
            out = self.session(EMOTION_CONDITIONER).run(
                ["emovec"], {"features": x[None], "lengths": self._cond_lengths(*x.shape)}
            )
        return out["emovec"][0]

    def emotion_vector(
        self, emo_cond_emb: np.ndarray, spk_cond_emb: np.ndarray, alpha: float = 1.0
    ) -> np.ndarray:
        """Stage 3.1: merge_emovec = base + alpha (emo - base), base from the speaker features."""
        return self._merge_emovec(self.emovec_of(emo_cond_emb), spk_cond_emb, alpha)

    def _merge_emovec(self, emo_vec: np.ndarray, spk_cond_emb: np.ndarray, alpha: float) -> np.ndarray:
        if alpha == 1.0:
            # base + (emo - base) is emo up to one rounding step: skip the speaker-side emotion
            # conditioner (about 10% of a voice's preparation) in the default case.
            return emo_vec
        base = self.emovec_of(spk_cond_emb)
        return emo.blend_emovec(base[None], emo_vec[None], alpha)[0]

    def emotion_vector_mode(
        self, style: np.ndarray, weights: Sequence[float], emovec: np.ndarray, alpha: float = 1.0
    ) -> np.ndarray:
        """Stage 3.3: the 8-value emotion vector (scaled by clamp(alpha, 0, 1)) mixed into emovec (D,)."""
        w = emo.scale_weights(weights, alpha)
        _, _, out = emo.emotion_vector_mode(style, w, np.asarray(emovec)[None], self.emotion_matrices)
        return out[0]

    def voice_conditioning(
        self,
        speaker: feat.SpeakerAudio,
        emotion_16k: np.ndarray,
        *,
        alpha: float = 1.0,
        vector: Sequence[float] | None = None,
    ) -> VoiceConditioning:
        """All of a voice's conditioning. `emotion_16k`: the emotion reference on the emotion path (the
        speaker file itself by default). With `vector`, the original drops the emotion reference (the
        speaker audio with alpha 1 stands in) and scales the vector by alpha instead."""
        blend = 1.0 if vector is not None else alpha
        side = self._side_chain(emotion_16k, speaker.audio_16k) if self.voice_chains_side_by_side else None
        spk = self.w2v_bert(speaker.audio_16k)
        latents = self.speaker_conditioning(spk)
        _, mel, prompt = self._prompt_features(speaker, spk)
        emo_vec, style = side.result() if side else self._side_work(emotion_16k, speaker.audio_16k)
        emovec = self._merge_emovec(emo_vec, spk, blend)
        if vector is not None:
            emovec = self.emotion_vector_mode(style, vector, emovec, alpha)
        return VoiceConditioning(latents, emovec, style, mel, prompt)

    def _side_chain(
        self, emotion_16k: np.ndarray, speaker_16k: np.ndarray
    ) -> Future[tuple[np.ndarray, np.ndarray]]:
        """The emotion chain, then CAMPPlus, on the side thread while the main thread does the rest of
        the speaker chain. CAMPPlus needs only the audio; it goes to the side because the speaker's own
        tail (conditioner, codec, length regulator) is the longer one: 0.57 s against 0.42 s after the
        w2v-BERT passes, full size, on 1 thread each."""
        if self._voice_side is None:
            self._voice_side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttts-voice")
        return self._voice_side.submit(self._side_work, emotion_16k, speaker_16k)

    def _side_work(self, emotion_16k: np.ndarray, speaker_16k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(emotion conditioner's emovec, CAMPPlus style)."""
        return self.emovec_of(self.w2v_bert(emotion_16k)), self.style(speaker_16k)

    def prefix(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> GPTPrompt:
        """Stage 3.4: the line's GPT input as this engine's GPT takes it: the (num_latents + 2 + L + 2, D)
        prefix for the ONNX trunk, conditioning rows + text ids for the TensorRT-LLM worker (its engine
        does the lookups). Opaque to callers except for `len`; it goes back into `generate` / `latent`."""
        return _gpt_kind(self.manifest).prompt_for(self.embeddings, spk_latents, emovec, text_ids)

    def generate(
        self,
        prefixes: Sequence[GPTPrompt],
        params: SamplingParams | Sequence[SamplingParams],
        generators: Sequence[np.random.Generator | int | None],
        *,
        ignore_stop: bool = False,
    ) -> list[Decoded]:
        """Batched AR decoding: one prefix, parameter set and random generator per line; a line's codes
        never depend on its batch-mates. `ignore_stop` (timing only) forces max_tokens codes."""
        gpt = self.decoder
        decoders = line_decoders(
            prefixes,
            params,
            generators,
            vocab=gpt.vocab,
            start_mel=self.tokens.start_mel,
            ignore_stop=ignore_stop,
        )
        with self.times.time("generate"):
            return generate_loop.generate(gpt, _own_prompts(gpt, prefixes), decoders)

    def latent(self, prefixes: Sequence[GPTPrompt], codes: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Stage 3.7, batched: the teacher-forced pass; (n_i, D) per line."""
        with self.times.time("latent"):
            gpt = self.decoder
            return gpt.latents(_own_prompts(gpt, prefixes), codes)

    # ------------------------------------------------------------------------------- stage 4: s2mel

    def vq2emb(self, codes: Sequence[np.ndarray]) -> np.ndarray:
        """Codec embedding of codes, batched (B, n_max, 1024); rows right-padded with code 0."""
        c = _pad_stack([np.asarray(x, np.int64).reshape(-1) for x in codes])
        return self.session(CODEC_VQ2EMB).run(["embedding"], {"codes": c})["embedding"]

    def target_lengths(self, code_lens: Sequence[int]) -> np.ndarray:
        """floor(1.72 n) as the original computes it (float32 product, truncated)."""
        n = np.asarray(code_lens, np.int64)
        return (n.astype(np.float32) * np.float32(self.code_to_frames)).astype(np.int64)

    def s2mel_content(
        self, latents: Sequence[np.ndarray], codes: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Stage 4.1: (cond (B, max Tg, C) zero past each row's Tg, ylens (B,) = floor(1.72 n))."""
        lens = np.array([np.asarray(c).size for c in codes], np.int64)
        if (lens < 1).any():
            raise ValueError("s2mel needs at least one code per row")
        with self.times.time("s2mel_content"):
            vq = self.vq2emb(codes)
            lat = _pad_stack([np.asarray(x, np.float32) for x in latents])
            out = self.session(S2MEL_CONTENT).run(
                ["cond", "ylens"], {"latent": lat, "vq_emb": vq, "code_lens": lens}
            )
        return out["cond"], out["ylens"].astype(np.int64)

    def cfm_inputs(
        self, voices: Sequence[VoiceConditioning], cond: np.ndarray, ylens: np.ndarray
    ) -> CFMInputs:
        """Per row [prompt condition | content] (Tm_b + Tg_b frames), padded into one batch."""
        rows = [
            np.concatenate([v.prompt_condition, cond[b, : int(ylens[b])]], axis=0)
            for b, v in enumerate(voices)
        ]
        return CFMInputs(
            cat_condition=_pad_stack(rows).astype(np.float32),
            x_lens=np.array([r.shape[0] for r in rows], np.int64),
            prompt=_pad_stack([v.ref_mel for v in voices], axis=1).astype(np.float32),
            prompt_lens=np.array([v.ref_mel.shape[1] for v in voices], np.int64),
            style=np.stack([np.asarray(v.style, np.float32).reshape(-1) for v in voices]),
        )

    def _cached_cfm(self, steps: int, cfg_rate: float, schedule: str, level: str) -> Any:
        """The piecewise, policy-driven CFM for these run settings, or None at T0 (one per setting)."""
        if level == "T0":
            return None
        key = (steps, float(cfg_rate), schedule, level)
        if key not in self._cfm_cache:
            from fasttts_cli.presets import S2MelOptions
            from fasttts_cli.s2mel_cache.piecewise_ort import CachedCFM

            opts = S2MelOptions(steps=steps, cfg_rate=cfg_rate, schedule=schedule, cache_level=level)
            self._cfm_cache[key] = CachedCFM.for_engine(
                self.folder, self.manifest, opts, self.options.threads
            )
        return self._cfm_cache[key]

    def cfm(
        self,
        inp: CFMInputs,
        z: np.ndarray,
        steps: int = 25,
        cfg_rate: float = 0.7,
        schedule: str = "uniform",
        cache_level: str | None = None,
    ) -> np.ndarray:
        """Stage 4.4: Euler CFM from the start noise z (B, n_mels, T) -> x (B, n_mels, T); each row's
        prompt region and padding are zero (its mel is x[b, :, prompt_lens[b]:x_lens[b]]).

        `cache_level` (default: the preset's s2mel.cache_level): above T0, the engine's calibrated
        s2mel cache policy runs the DiT in pieces and skips what the policy says to skip."""
        b, _, t_len = z.shape
        if inp.cat_condition.shape[:2] != (b, t_len):
            raise ValueError(f"cat_condition {inp.cat_condition.shape} does not match z {z.shape}")
        cached = self._cached_cfm(steps, cfg_rate, schedule, cache_level or self.preset.s2mel.cache_level)
        if cached is not None:
            with self.times.time("cfm"):
                return cached.solve(inp.cat_condition, inp.x_lens, inp.prompt, inp.prompt_lens, inp.style, z)
        pos = np.arange(t_len)[None, :]
        in_prompt = (pos < inp.prompt_lens[:, None]).astype(np.float32)[:, None, :]
        keep = ((pos >= inp.prompt_lens[:, None]) & (pos < inp.x_lens[:, None])).astype(np.float32)[
            :, None, :
        ]
        prompt = inp.prompt[:, :, :t_len]
        prompt_x = np.pad(prompt, ((0, 0), (0, 0), (0, t_len - prompt.shape[2]))) * in_prompt
        x = np.asarray(z, np.float32) * keep
        ts = euler_times(steps, schedule)
        sess = self.session(DIT_CFG_STEP)
        cfg = np.array([cfg_rate], np.float32)
        prompt_lens = np.asarray(inp.prompt_lens, np.int64)
        t = ts[0]
        with self.times.time("cfm"):
            for s in range(1, steps + 1):
                dt = np.float32(ts[s] - ts[s - 1])
                v = sess.run(
                    ["v"],
                    {
                        "x": x,
                        "prompt_x": prompt_x,
                        "x_lens": inp.x_lens,
                        "t": np.full((b,), t, np.float32),
                        "style": inp.style,
                        "mu": inp.cat_condition,
                        "cfg_rate": cfg,
                        "prompt_lens": prompt_lens,
                    },
                )["v"]
                x = ((x + dt * v) * keep).astype(np.float32)
                t = np.float32(t + dt)
        self.times.calls["cfm_steps"] = self.times.calls.get("cfm_steps", 0) + steps
        return x

    # ------------------------------------------------------------------------------- stage 5: vocoder

    def vocode(self, mels: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Stage 5, batched: mels (n_mels, T_b) -> wavs (hop * T_b,) float32 in [-1, 1]."""
        lens = np.array([m.shape[1] for m in mels], np.int64)
        with self.times.time("vocoder"):
            wav = self.session(VOCODER).run(
                ["wav"], {"mel": _pad_stack(list(mels), axis=1).astype(np.float32), "lengths": lens}
            )["wav"]
        return [wav[b, : int(lens[b]) * self.hop].copy() for b in range(len(mels))]

    # ------------------------------------------------------------------------------- composite

    def cfm_noise(self, rng: np.random.Generator, frames: int) -> np.ndarray:
        """Start noise (n_mels, frames) float32 ~ N(0, 1) from the row's own generator."""
        return rng.standard_normal((self.mel_params.n_mels, frames), dtype=np.float32)

    def codes_to_wavs(
        self,
        voices: Sequence[VoiceConditioning],
        prefixes: Sequence[GPTPrompt],
        codes: Sequence[np.ndarray],
        noises: Sequence[np.ndarray | np.random.Generator],
        *,
        steps: int = 25,
        cfg_rate: float = 0.7,
        schedule: str = "uniform",
        cache_level: str | None = None,
    ) -> list[np.ndarray]:
        """Latent pass, s2mel and vocoder for a batch of rows (each with >= 1 code). `noises[b]`: the
        CFM start noise (n_mels, Tm_b + Tg_b), or a generator to draw it from. The latent pass runs
        the whole batch; s2mel and the vocoder take `s2mel_rows` lines per call (every stage is per
        row, so the grouping changes only the time)."""
        lat = self.latent(prefixes, codes)
        n = len(voices)
        size = self.s2mel_rows(n)
        wavs: list[np.ndarray] = []
        for lo in range(0, n, size):
            part = slice(lo, lo + size)
            wavs += self._mels_to_wavs(
                voices[part], lat[part], codes[part], noises[part], steps, cfg_rate, schedule, cache_level
            )
        return wavs

    def s2mel_rows(self, n: int) -> int:
        """Lines per s2mel/vocoder call for a batch of n (the preset's s2mel.rows_per_call; 0 = all).
        An integer DiT always takes one line per call: it scales activations once per call, so
        batch-mates would change each other's audio."""
        size = int(self.preset.s2mel.rows_per_call)
        dit = self.manifest.components.get(DIT_CFG_STEP)
        if dit is not None and dit.precision in INTEGER_PRECISIONS:
            size = 1
        return max(1, n if size <= 0 else min(size, n))

    def _mels_to_wavs(
        self,
        voices: Sequence[VoiceConditioning],
        lat: Sequence[np.ndarray],
        codes: Sequence[np.ndarray],
        noises: Sequence[np.ndarray | np.random.Generator],
        steps: int,
        cfg_rate: float,
        schedule: str,
        cache_level: str | None,
    ) -> list[np.ndarray]:
        cond, ylens = self.s2mel_content(lat, codes)
        inp = self.cfm_inputs(voices, cond, ylens)
        t_len = int(inp.x_lens.max())
        z = np.zeros((len(voices), self.mel_params.n_mels, t_len), np.float32)
        for b, nz in enumerate(noises):
            n = int(inp.x_lens[b])
            z[b, :, :n] = self.cfm_noise(nz, n) if isinstance(nz, np.random.Generator) else nz[:, :n]
        x = self.cfm(inp, z, steps, cfg_rate, schedule, cache_level)
        mels = [x[b, :, int(inp.prompt_lens[b]) : int(inp.x_lens[b])] for b in range(len(voices))]
        return self.vocode(mels)


def load_text_front_end(folder: Path, manifest: Manifest, preset: Preset | None = None) -> Any:
    """The tokenizer + segmenter from the engine folder alone (no sessions)."""
    from fasttts_cli.indextts2.text import TextFrontEnd

    limit = int(manifest.config["gpt"]["max_text_tokens"])
    if preset is not None:
        limit = min(limit, int(preset.limits.max_text_tokens))
    return TextFrontEnd.load(folder / manifest.files[BPE_MODEL], max_text_tokens=limit)


def check_manifest(manifest: Manifest, folder: Path) -> None:
    """Refuse an engine this runtime cannot drive; the message names every mismatch."""
    problems: list[str] = []
    if str(manifest.model_version) not in SUPPORTED_MODEL_VERSIONS:
        problems.append(
            f"model_version {manifest.model_version!r} "
            f"(this runtime runs {', '.join(SUPPORTED_MODEL_VERSIONS)})"
        )
    cfg = manifest.config or {}
    for section, keys in _CONFIG_KEYS.items():
        sec = cfg.get(section)
        if not isinstance(sec, Mapping):
            problems.append(f"config.{section} is missing")
            continue
        problems += [f"config.{section}.{k} is missing" for k in keys if k not in sec]
    if problems:
        raise EngineMismatchError(f"{folder / 'manifest.json'}: " + "; ".join(problems))
    layers = int(cfg["gpt"]["layers"])
    trtllm = manifest.components.get(GPT_TRTLLM)
    if trtllm is not None:
        if trtllm.backend != "tensorrt-llm":
            problems.append(f"component {GPT_TRTLLM!r} backend {trtllm.backend!r} (runs: tensorrt-llm)")
        if not (folder / trtllm.file).is_dir():
            problems.append(f"component {GPT_TRTLLM!r}: folder {trtllm.file!r} is missing")
    for name, (ins, outs) in required_io(layers, trtllm_gpt=trtllm is not None).items():
        comp = manifest.components.get(name)
        if comp is None:
            problems.append(f"component {name!r} is missing")
            continue
        if comp.backend not in SUPPORTED_BACKENDS:
            problems.append(
                f"component {name!r} backend {comp.backend!r} (runs: {', '.join(SUPPORTED_BACKENDS)})"
            )
        outs_have = set(comp.outputs) if comp.outputs else None
        if comp.inputs and not io_matches(name, layers, set(comp.inputs), outs_have):
            problems.append(
                f"component {name!r} inputs {sorted(comp.inputs)} / outputs {sorted(comp.outputs)}, "
                f"expected {sorted(ins)} / {sorted(outs)}"
            )
    needed = [Path(f).stem for f in dec.TABLE_FILES.values()] + [
        W2V_MEAN,
        W2V_VAR,
        SPK_MATRIX,
        EMO_MATRIX,
        BPE_MODEL,
    ]
    problems += [f"file {k!r} is not listed" for k in needed if k not in manifest.files]
    if problems:
        raise EngineMismatchError(
            f"{folder / 'manifest.json'}: this engine does not match the IndexTTS-2 runtime: "
            + "; ".join(problems),
            hint="rebuild it with this version of `fasttts build`",
        )


def segment_seed_generator(seed: int, segment: int) -> np.random.Generator:
    """The sampler's generator for segment k of a line: segment 0 is the line's own PCG64(seed); later
    segments get independent streams, so a segment never depends on how many draws another made."""
    from fasttts_cli.indextts2.sampling import seed_generator

    if segment == 0:
        return seed_generator(seed)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed) & (2**64 - 1), segment])))


def noise_generator(seed: int, segment: int) -> np.random.Generator:
    """The CFM start-noise generator of a segment (separate from the sampler's stream)."""
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([int(seed) & (2**64 - 1), segment, 0x5EED]))
    )


def frames_for(n_codes: int, code_to_frames: float = 1.72) -> int:
    return int(np.float32(n_codes) * np.float32(code_to_frames))


__all__ = [
    "CFMInputs",
    "IndexTTS2Engine",
    "NoStopDecoder",
    "SpeakerFeatures",
    "StageTimes",
    "VoiceConditioning",
    "check_manifest",
    "euler_times",
    "frames_for",
    "load_text_front_end",
    "noise_generator",
    "resolve_preset",
    "segment_seed_generator",
]
