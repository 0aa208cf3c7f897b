"""The IndexTTS-2 stage API on PyTorch, from a checkpoint directory (no engine folder needed).

`TorchEngine` implements the stage API of `indextts2.stages` (`EngineStages`, and `VoiceStages` for a
voice's networks), so `IndexTTS2Synthesizer`'s segmenting, batching, per-line seeds and error handling
serve this backend unchanged, and a voice's conditioning is `indextts2.voice.VoiceFlow`, the same flow
as the ONNX engine's. The audio front end, text front end, emotion math, Euler time grid and noise
generators are the numpy runtime's own functions; the networks are the build-side modules, run by
`decode_torch` (GPT), `s2mel_torch` (CFM, BigVGAN) and directly (w2v-BERT to layer 17, codec, CAMPPlus,
length regulator, conditioners: once per voice, fp32, cached by the synthesizer).

Precision comes from the preset: `components.gpt.precision` for the GPT trunk (fp32/fp16/bf16),
`components.dit.precision` for the DiT; BigVGAN and the per-voice networks run fp32 (TF32 on CUDA).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fasttts_cli import __version__
from fasttts_cli.backends.torch.s2mel import S2MelSettings, TorchS2Mel, TorchVocoder
from fasttts_cli.errors import UsageError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import emotion as emo
from fasttts_cli.indextts2 import features as feat
from fasttts_cli.indextts2.cfm import start_noise
from fasttts_cli.indextts2.decode_torch import DecodeSettings, TorchGPT
from fasttts_cli.indextts2.generate_loop import CodeTap, line_decoders
from fasttts_cli.indextts2.sampling import Decoded, SamplingParams
from fasttts_cli.indextts2.stages import StageTimes
from fasttts_cli.indextts2.voice import VoiceConditioning, VoiceFlow, cond_lengths
from fasttts_cli.nets.s2mel import target_lengths
from fasttts_cli.spec.presets import Preset, load_preset

BACKEND = "torch"
# 2: the voice flow is the ONNX engine's (at alpha 1 the emovec is the emotion conditioner's own, not
# base + 1 * (emo - base), one rounding step away), and the GPT samples with the numpy runtime's sampler
# (generate_loop), not device noise: cached voices and lines are made anew.
TORCH_CODE_REV = 2
Frames = Sequence[int | None] | None  # per row: the mel frames to render to, None for the natural length
Content = tuple[torch.Tensor, torch.Tensor]  # (cond (B, max Tg, C), Tg (B,)) on the device
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def precision_dtype(preset: Preset, component: str, default: str = "fp32") -> torch.dtype:
    spec = preset.components.get(component)
    name = spec.precision if spec is not None else default
    if name not in _DTYPES:
        raise UsageError(
            f"preset {preset.name}: components.{component}.precision = {name!r} is not available on the "
            "torch backend",
            hint="use fp32, fp16 or bf16",
        )
    return _DTYPES[name]


def check_torch_preset(preset: Preset) -> None:
    """Every component the preset names must be on the torch backend (a build-time key mismatch), and the
    s2mel cache is off: its calibrated policies live in engine folders, which this backend does not use."""
    if preset.s2mel.cache_level != "T0":
        raise UsageError(
            f"preset {preset.name}: s2mel.cache_level = {preset.s2mel.cache_level!r} is not available on the "
            "torch backend yet",
            hint='use cache_level = "T0" (no s2mel caching) or an engine with a calibrated policy',
        )
    bad = [f"{k} ({v.backend})" for k, v in sorted(preset.components.items()) if v.backend != BACKEND]
    if bad:
        raise UsageError(
            f"preset {preset.name}: components {', '.join(bad)} are not on the torch backend",
            hint='use gpu-torch-fp16, gpu-torch-bf16 or a preset whose components all say backend = "torch"',
        )


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class TorchEngine(VoiceFlow):
    """Stage API over loaded modules (see the module docstring)."""

    model_tag = "indextts2-torch"  # the identity's model part (cached voices and lines are keyed by it)
    voice_chains_side_by_side = False  # one device stream: the chains gain nothing from two threads
    renders_to_length = True  # the s2mel net takes its target frames (codes_to_wavs `frames`)

    def __init__(self, modules: Any, preset: Preset, *, device: torch.device | str | None = None) -> None:
        self.modules = modules
        self.preset = preset
        self.device = torch.device(device) if device is not None else default_device()
        self.times = StageTimes()
        cfg = modules.config
        self.config = cfg
        uv = modules.gpt
        c = uv.cfg
        self.tokens = dec.GPTTokens(
            c.start_text_token, c.stop_text_token, c.start_mel_token, c.stop_mel_token
        )
        self.embeddings = self._host_embeddings({k: v.numpy() for k, v in uv.host_tables().items()})
        lim = preset.limits
        beams = max(1, int(preset.decode.beams))
        self.gpt = TorchGPT(
            uv,
            dtype=precision_dtype(preset, "gpt"),
            device=self.device,
            settings=DecodeSettings(max_lines=int(lim.max_batch), max_beams=max(3, beams)),
        )
        s2s = S2MelSettings(max_rows=int(lim.max_batch))
        self.s2mel = TorchS2Mel(
            modules.s2mel, dtype=precision_dtype(preset, "dit"), device=self.device, settings=s2s
        )
        self.vocoder = TorchVocoder(modules.bigvgan, device=self.device, settings=s2s)
        self.w2v = modules.w2v_bert.to(self.device).eval()
        self.codec = modules.codec.to(self.device).eval()
        self.campplus = modules.campplus.to(self.device).eval()
        self.mel_params = feat.MelParams.from_config(cfg.raw["s2mel"])
        self.sample_rate = int(self._vocoder_rate())
        self.hop = self.vocoder.hop
        self.emotion_matrices = emo.EmotionMatrices(
            spk=modules.spk_matrix, emo=modules.emo_matrix, counts=tuple(int(x) for x in cfg.emo_num)
        )
        self._digest: str | None = None
        self._text: Any = None

    def _host_embeddings(self, tables: dict[str, np.ndarray]) -> dec.HostEmbeddings:
        keys = ("text_embedding", "text_pos", "mel_embedding", "mel_pos", "speed_emb")
        return dec.HostEmbeddings(*(tables[k] for k in keys), tokens=self.tokens)

    def _vocoder_rate(self) -> int:
        path = self.modules.paths.bigvgan / "config.json"
        try:
            return int(json.loads(path.read_text(encoding="utf-8")).get("sampling_rate", 22050))
        except (OSError, ValueError):
            return 22050

    # ------------------------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        checkpoint_dir: Path | str,
        preset: Preset | str | Path,
        *,
        device: torch.device | str | None = None,
    ) -> TorchEngine:
        p = preset if isinstance(preset, Preset) else load_preset(preset)
        check_torch_preset(p)
        return cls(cls.load_modules(Path(checkpoint_dir)), p, device=device)

    @staticmethod
    def load_modules(checkpoint_dir: Path) -> Any:
        from fasttts_cli.nets.checkpoint import load_checkpoint

        return load_checkpoint(checkpoint_dir)

    def identity(self) -> str:
        if self._digest is None:
            self._digest = self.modules.digest()
        build = json.dumps(self.preset.build_keys(), sort_keys=True)
        build_id = hashlib.sha256(build.encode()).hexdigest()[:12]
        return f"{self.model_tag}@{self._digest[:16]}|{self.preset.name}|{build_id}"

    def code_identity(self) -> str:
        return f"fasttts-{__version__}.torch-{TORCH_CODE_REV}|device={self.device.type}"

    @property
    def text(self) -> Any:
        if self._text is None:
            from fasttts_cli.indextts2.text import TextFrontEnd

            limit = min(int(self.modules.gpt.cfg.max_text_tokens), int(self.preset.limits.max_text_tokens))
            self._text = TextFrontEnd.load(self.modules.bpe_model, max_text_tokens=limit)
        return self._text

    @property
    def max_codes(self) -> int:
        return self.gpt.max_codes

    def close(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------------------- voice stages
    # (VoiceStages on the modules, fp32; voice.VoiceFlow chains them)

    @torch.inference_mode()
    def w2v_bert(self, audio_16k: np.ndarray) -> np.ndarray:
        """(T, 1024) normalised hidden_states[17] (the model is built only to layer 17)."""
        with self.times.time("w2v_bert"):
            x, mask = feat.w2v_bert_features(audio_16k)
            out = self.w2v(self._tensor(x), self._tensor(mask))
        return out[0, : int(mask[0].sum())].float().cpu().numpy()

    @torch.inference_mode()
    def codec_quantize(self, spk_cond_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, codes, s_ref = self.codec.quantize(self._tensor(spk_cond_emb)[None])
        return codes[0].cpu().numpy(), s_ref[0].float().cpu().numpy()

    @torch.inference_mode()
    def style(self, audio_16k: np.ndarray) -> np.ndarray:
        with self.times.time("speaker_features"):
            _, fbank = feat.campplus_fbank(audio_16k)
            return self.campplus(self._tensor(fbank)[None])[0].float().cpu().numpy()

    @torch.inference_mode()
    def length_regulator(self, x: np.ndarray, y_len: int) -> np.ndarray:
        return self.s2mel.prompt_condition(self._tensor(x), y_len).cpu().numpy()

    def speaker_conditioning(self, spk_cond_emb: np.ndarray) -> np.ndarray:
        return self._conditioner(self.gpt.uv.speaker_latents, spk_cond_emb)

    def emovec_of(self, cond_emb: np.ndarray) -> np.ndarray:
        return self._conditioner(self.gpt.uv.emovec_of, cond_emb)

    @torch.inference_mode()
    def _conditioner(self, net: Callable[..., torch.Tensor], features: np.ndarray) -> np.ndarray:
        with self.times.time("conditioners"):
            lengths = self._tensor(cond_lengths(*features.shape))
            return net(self._tensor(features)[None], lengths)[0].float().cpu().numpy()

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    # ------------------------------------------------------------------------------- GPT

    def prefix(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> np.ndarray:
        return self.gpt.prompt(spk_latents, emovec, text_ids)

    def generate(
        self,
        prefixes: Sequence[np.ndarray],
        params: SamplingParams | Sequence[SamplingParams],
        generators: Sequence[np.random.Generator | int | None],
        *,
        ignore_stop: bool = False,
        taps: Sequence[CodeTap | None] | None = None,
    ) -> list[Decoded]:
        """As `IndexTTS2Engine.generate`: the one generate loop over `TorchGPT`, the same sampler."""
        decoders = line_decoders(
            prefixes,
            params,
            generators,
            vocab=self.gpt.vocab,
            start_mel=self.tokens.start_mel,
            ignore_stop=ignore_stop,
        )
        with self.times.time("generate"):
            out = self.gpt.decode(prefixes, decoders, taps)
            self._sync()
        return out

    def latent(self, prefixes: Sequence[np.ndarray], codes: Sequence[np.ndarray]) -> list[torch.Tensor]:
        with self.times.time("latent"):
            out = self.gpt.latents(prefixes, codes)
            self._sync()
        return out

    # ------------------------------------------------------------------------------- s2mel + vocoder

    @torch.inference_mode()
    def codes_to_wavs(
        self,
        voices: Sequence[VoiceConditioning],
        prefixes: Sequence[np.ndarray],
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
        """Latent pass, s2mel and vocoder for a batch of rows (as `IndexTTS2Engine.codes_to_wavs`,
        `frames` and `latents` too)."""
        if cache_level not in (None, "T0"):
            # A per-line override reaches here; the preset itself was checked at load.
            raise UsageError(f"s2mel cache_level {cache_level!r}: the torch backend has no s2mel cache")
        dev = self.device
        cond, ylens = self.content(prefixes, codes, frames, latents)
        rows = [
            torch.cat([torch.from_numpy(v.prompt_condition).to(dev), cond[b, : int(ylens[b])]], 0)
            for b, v in enumerate(voices)
        ]
        x_lens = torch.tensor([r.shape[0] for r in rows], device=dev)
        t_len = int(x_lens.max())
        mu = torch.stack([torch.nn.functional.pad(r, (0, 0, 0, t_len - r.shape[0])) for r in rows])
        tp = max(v.ref_mel.shape[1] for v in voices)
        prompt = torch.stack(
            [
                torch.nn.functional.pad(torch.from_numpy(v.ref_mel), (0, tp - v.ref_mel.shape[1]))
                for v in voices
            ]
        )
        prompt_lens = torch.tensor([v.ref_mel.shape[1] for v in voices])
        style = torch.stack([torch.from_numpy(np.asarray(v.style, np.float32).reshape(-1)) for v in voices])
        z = start_noise(noises, x_lens.tolist(), self.s2mel.n_mels)
        with self.times.time("cfm"):
            x = self.s2mel.cfm(
                mu,
                x_lens,
                prompt,
                prompt_lens,
                style,
                torch.from_numpy(z),
                steps=steps,
                cfg_rate=cfg_rate,
                schedule=schedule,
            )
            self._sync()
        self.times.calls["cfm_steps"] = self.times.calls.get("cfm_steps", 0) + steps
        mels = self.s2mel.mels(x, prompt_lens, x_lens)
        with self.times.time("vocoder"):
            wavs = self.vocoder(mels)
            out = [w.cpu().numpy().astype(np.float32) for w in wavs]
        return out

    def content(
        self,
        prefixes: Sequence[Any],
        codes: Sequence[np.ndarray],
        frames: Frames = None,
        latents: Sequence[np.ndarray] | None = None,
    ) -> Content:
        """Stage 4.1: the content condition (B, max Tg, C) and Tg (B,): the latent pass (or the given
        `latents`, a streamer's), the codes' VQ embeddings and s2mel's content net, to `frames[b]` frames
        or, where None, the natural length."""
        lat = self.latent(prefixes, codes) if latents is None else list(latents)
        with self.times.time("s2mel_content"):
            lens, padded, target = self._code_batch(codes, frames)
            vq = self.codec.vq2emb(padded)
            return self.s2mel.content(lat, vq, lens, target)

    def _code_batch(
        self, codes: Sequence[np.ndarray], frames: Frames
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(codes per row (B,), codes zero-padded (B, n_max), target mel frames (B,)) on the device."""
        dev = self.device
        sizes = [int(np.asarray(c).size) for c in codes]
        padded = np.zeros((len(codes), max(sizes)), np.int64)
        for i, c in enumerate(codes):
            padded[i, : sizes[i]] = np.asarray(c).reshape(-1)
        target = self.target_lengths(sizes)
        if frames is not None:
            pairs = zip(target.tolist(), frames, strict=True)
            target = np.array([t if f is None else int(f) for t, f in pairs], np.int64)
        if (target < 1).any():
            raise ValueError(f"s2mel target frames must be >= 1, got {target.tolist()}")
        lens = torch.tensor(sizes, device=dev)
        return lens, torch.from_numpy(padded).to(dev), torch.from_numpy(target).to(dev)

    def target_lengths(self, code_lens: Sequence[int]) -> np.ndarray:
        """The natural mel frames of rows of n codes: floor(1.72 n), as the s2mel net computes it."""
        return target_lengths(torch.tensor([int(n) for n in code_lens], dtype=torch.int64)).numpy()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": BACKEND,
            "device": str(self.device),
            "gpt_dtype": str(self.gpt.dtype),
            "dit_dtype": str(self.s2mel.dtype),
            "preset": self.preset.name,
            "limits": asdict(self.preset.limits),
        }
