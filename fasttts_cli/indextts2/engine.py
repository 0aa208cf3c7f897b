"""IndexTTS-2 engine: the stage API over an engine folder's sessions (numpy + ONNX Runtime, never torch).

`IndexTTS2Engine.load(folder)` reads the manifest (and nothing outside the folder), refuses an engine this
runtime cannot drive with a message naming what differs (components.check_manifest), and opens each
component lazily through the backend registry (folder_sessions), so a caller that only needs the tokenizer
pays for nothing else. Every stage takes explicit arrays and returns arrays, so each can be compared with
the original implementation on its own (stage numbers as in tools/parity2/README.md):

    1.1-1.8, 3.1-3.3   a voice's conditioning: voice.VoiceFlow over voice_sessions' networks
    3.4 prefix, 3.5 generate (+ sampling), 3.7 latent      the GPT, batched, per-line generators
    4.1 s2mel_content, 4.4 cfm (Euler, batched CFG), 5 vocode

`codes_to_wavs` chains the stages after the GPT for the synthesizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.onnxruntime.session import Session, SessionOptions
from fasttts_cli.backends.protocol import GPTSteps
from fasttts_cli.cfm.schedules import euler_times
from fasttts_cli.errors import EngineMismatchError
from fasttts_cli.indextts2 import cfm as cfm_stage
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import emotion as emo
from fasttts_cli.indextts2 import features as feat
from fasttts_cli.indextts2 import generate_loop
from fasttts_cli.indextts2.components import (
    CODEC_VQ2EMB,
    DIT_CFG_STEP,
    GPT_TRUNK,
    MODEL_ID,
    S2MEL_CONTENT,
    S2MEL_TARGET,
    VOCODER,
    check_manifest,
    emotion_matrices,
    gpt_tokens,
    load_text_front_end,
    resolve_preset,
    takes_target_frames,
)
from fasttts_cli.indextts2.decode_inplace import InplaceGPTDecoder, decoder_for
from fasttts_cli.indextts2.folder_sessions import FolderSessions
from fasttts_cli.indextts2.generate_loop import CodeTap, NoStopDecoder, line_decoders
from fasttts_cli.indextts2.gpt_trtllm import GPT_TRTLLM, LinePrompt, TrtllmGPT
from fasttts_cli.indextts2.sampling import Decoded, SamplingParams
from fasttts_cli.indextts2.stages import StageTimes
from fasttts_cli.indextts2.voice import SpeakerFeatures, VoiceConditioning, VoiceFlow
from fasttts_cli.indextts2.voice_sessions import SessionVoiceStages
from fasttts_cli.spec.engine_folder import Manifest, read_manifest
from fasttts_cli.spec.presets import INTEGER_PRECISIONS, Preset

# --------------------------------------------------------------------------------------- data at seams


@dataclass
class CFMInputs:
    """One batch of rows for `cfm`, padded to the longest row (built by `cfm_inputs`)."""

    cat_condition: np.ndarray  # (B, T, C) [prompt condition | content] per row
    x_lens: np.ndarray  # (B,) int64 Tm_b + Tg_b
    prompt: np.ndarray  # (B, n_mels, Tp) ref mels, valid up to prompt_lens
    prompt_lens: np.ndarray  # (B,) int64 Tm_b
    style: np.ndarray  # (B, style_dim)


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


class IndexTTS2Engine(VoiceFlow, SessionVoiceStages):
    """The stage API over one engine folder. Sessions open on first use (`open_all` to force); each
    through the backend registry, by the backend its manifest entry names."""

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
        self.mel_params = feat.MelParams.from_manifest(cfg["s2mel"])
        self.code_to_frames = float(cfg["s2mel"]["code_to_frames"])
        self.hop = int(cfg["vocoder"]["hop"])
        self.sample_rate = int(cfg["vocoder"]["sampling_rate"])
        self.tokens = gpt_tokens(g)
        self.sessions = FolderSessions(folder, manifest, self.options, {GPT_TRTLLM: self._trtllm_context})
        self._emb: dec.HostEmbeddings | None = None
        self._decoder: dec.GPTDecoder | InplaceGPTDecoder | None = None
        self._mats: emo.EmotionMatrices | None = None
        self._text: Any = None
        self._cfm_cache: dict[tuple[int, float, str, str], Any] = {}

    # ------------------------------------------------------------------------------- loading

    model_id = MODEL_ID  # the manifest model_id this engine runs

    @staticmethod
    def check(manifest: Manifest, folder: Path) -> None:
        """Refuse a folder this runtime cannot drive (components.check_manifest)."""
        check_manifest(manifest, folder)

    @classmethod
    def load(
        cls,
        engine_dir: Path | str,
        preset: Preset | str | Path | None = None,
        threads: int | None = None,
    ) -> IndexTTS2Engine:
        folder = Path(engine_dir)
        manifest = read_manifest(folder, expect_model=cls.model_id)
        cls.check(manifest, folder)
        p = resolve_preset(manifest, preset, folder)
        return cls(folder, manifest, p, SessionOptions(threads=threads))

    def identity(self) -> str:
        return self.manifest.identity()

    def session(self, name: str) -> Session:
        return self.sessions.get(name)

    @property
    def voice_chains_side_by_side(self) -> bool:
        return self.sessions.voice_chains_side_by_side

    def open_all(self) -> None:
        self.sessions.open_all()

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
        """The GPT on TensorRT-LLM: a worker process over the folder's `gpt_trtllm/`, a session like the
        others (its registry opener, gpt_trtllm.open_worker, checks it against this folder's tables)."""
        return self.session(GPT_TRTLLM)

    def _trtllm_context(self) -> dict[str, Any]:
        n_conds = int(self.manifest.config["gpt"]["num_latents"]) + 2
        return {"emb": self.embeddings, "n_conds": n_conds}

    @property
    def emotion_matrices(self) -> emo.EmotionMatrices:
        if self._mats is None:
            self._mats = emotion_matrices(self.folder, self.manifest)
        return self._mats

    @property
    def max_codes(self) -> int:
        """Most codes one segment can have (mel position table), whatever the preset asks."""
        return self.embeddings.max_codes

    def close(self) -> None:
        self._close_voice_side()
        self.sessions.close()
        self._decoder = None

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
        taps: Sequence[CodeTap | None] | None = None,
    ) -> list[Decoded]:
        """Batched AR decoding: one prefix, parameter set and random generator per line; a line's codes
        never depend on its batch-mates. `ignore_stop` (timing only) forces max_tokens codes; `taps`
        (streaming) hear each one-beam line's codes as they are drawn (generate_loop)."""
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
            return generate_loop.generate(gpt, _own_prompts(gpt, prefixes), decoders, taps)

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

    def content_lengths(
        self, codes: Sequence[np.ndarray], frames: Sequence[int | None] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(codes per row, target frames per row): `frames[b]`, or where that is None (or `frames` is) the
        model's natural `target_lengths`; ValueError for an empty row or a target below one frame."""
        lens = np.array([np.asarray(c).size for c in codes], np.int64)
        if (lens < 1).any():
            raise ValueError("s2mel needs at least one code per row")
        ylens = self.target_lengths(lens)
        if frames is not None:
            ylens = np.array(
                [y if f is None else int(f) for y, f in zip(ylens, frames, strict=True)], np.int64
            )
        if (ylens < 1).any():
            raise ValueError(f"s2mel target frames must be >= 1, got {ylens.tolist()}")
        return lens, ylens

    @property
    def renders_to_length(self) -> bool:
        """Whether s2mel_content takes its target frames (engines built before it did cannot render a
        line to a length); read from the session's inputs."""
        return takes_target_frames({i.name for i in self.session(S2MEL_CONTENT).inputs})

    def s2mel_content(
        self,
        latents: Sequence[np.ndarray],
        codes: Sequence[np.ndarray],
        frames: Sequence[int | None] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Stage 4.1: (cond (B, max Tg, C) zero past each row's Tg, ylens (B,) = Tg). Tg: `frames[b]`,
        or where that is None (or `frames` is) the natural floor(1.72 n)."""
        lens, ylens = self.content_lengths(codes, frames)
        fixed = frames is not None and any(f is not None for f in frames)
        with self.times.time("s2mel_content"):
            sess = self.session(S2MEL_CONTENT)
            feeds = {"latent": _pad_stack([np.asarray(x, np.float32) for x in latents]), "code_lens": lens}
            feeds["vq_emb"] = self.vq2emb(codes)
            if self.renders_to_length:
                return sess.run(["cond"], {**feeds, S2MEL_TARGET: ylens})["cond"], ylens
            if fixed:
                raise EngineMismatchError(
                    f"{self.folder}: this engine was built before s2mel could render a line to a length",
                    hint="rebuild it with `fasttts build --checkpoint DIR --preset PRESET`",
                )
            out = sess.run(["cond", "ylens"], feeds)
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
        key = (steps, float(cfg_rate), schedule, level)
        if key not in self._cfm_cache:
            opener = cfm_stage.ort_opener(self.options.threads)
            self._cfm_cache[key] = cfm_stage.cached_cfm(
                self.folder, self.manifest, steps, cfg_rate, schedule, level, opener
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
            velocity_for = cached.velocity
        else:
            sess = self.session(DIT_CFG_STEP)
            velocity_for = lambda run: cfm_stage.session_velocity(sess, run)  # noqa: E731
        with self.times.time("cfm"):
            x = cfm_stage.solve(velocity_for, inp, z, steps, cfg_rate, schedule)
        if cached is None:
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
        return cfm_stage.draw_noise(rng, self.mel_params.n_mels, frames)

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
        frames: Sequence[int | None] | None = None,
        latents: Sequence[np.ndarray] | None = None,
    ) -> list[np.ndarray]:
        """Latent pass, s2mel and vocoder for a batch of rows (each with >= 1 code); `latents` given (a
        streamer's, from the GPT's own hidden states) skip the latent pass. `noises[b]`: the
        CFM start noise (n_mels, Tm_b + Tg_b), or a generator to draw it from. `frames[b]`: row b's mel
        frames Tg_b, so hop * Tg_b samples (None: the natural floor(1.72 n)). The latent pass runs
        the whole batch; s2mel and the vocoder take `s2mel_rows` lines per call (every stage is per
        row, so the grouping changes only the time)."""
        lat = list(latents) if latents is not None else self.latent(prefixes, codes)
        n = len(voices)
        size = self.s2mel_rows(n)
        targets = list(frames) if frames is not None else [None] * n
        wavs: list[np.ndarray] = []
        for lo in range(0, n, size):
            part = slice(lo, lo + size)
            wavs += self._mels_to_wavs(
                voices[part],
                lat[part],
                codes[part],
                noises[part],
                (steps, cfg_rate, schedule, cache_level),
                targets[part],
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
        run: tuple[int, float, str, str | None],
        frames: Sequence[int | None],
    ) -> list[np.ndarray]:
        cond, ylens = self.s2mel_content(lat, codes, frames)
        inp = self.cfm_inputs(voices, cond, ylens)
        z = cfm_stage.start_noise(noises, inp.x_lens, self.mel_params.n_mels)
        x = self.cfm(inp, z, *run)
        mels = [x[b, :, int(inp.prompt_lens[b]) : int(inp.x_lens[b])] for b in range(len(voices))]
        return self.vocode(mels)


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
