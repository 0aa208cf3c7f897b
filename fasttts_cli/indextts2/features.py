"""Audio front end of IndexTTS-2 in numpy: loading, resampling and the three feature types.

Reproduces what the original computes with librosa, torchaudio and transformers, without importing any of
them (and never torch), so the runtime side can prepare a voice with numpy + soxr alone:

- speaker audio (stage 1.1): decode at the native rate (libsndfile, like librosa), soxr HQ to 22050 Hz
  (librosa's `soxr_hq`), cut to 15 s, then 22050 -> 16000 with torchaudio's windowed-sinc (Hann) resampler,
  re-implemented here as a polyphase matrix product;
- emotion audio (stage 1.8): decoded and taken straight to 16 kHz with soxr HQ (`librosa.load(sr=16000)`);
- SeamlessM4T features (stage 1.2) for w2v-BERT, Kaldi fbank (stage 1.6) for CAMPPlus, and the 22.05 kHz
  Slaney log-mel (stage 1.5) that is the CFM prompt.

Intermediate maths runs in float64 (the references run mostly in float32, so ours is the more precise of
the two and the difference stays at float32 rounding); every public result is float32.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr
from numpy.lib.stride_tricks import sliding_window_view

from fasttts_cli.errors import InputError
from fasttts_cli.nets.config import SpectConfig

SR_MEL = 22050
SR_W2V = 16000
MAX_PROMPT_SECONDS = 15.0

# ---------------------------------------------------------------------------------------------- loading


def load_audio_native(path: Path | str) -> tuple[np.ndarray, int]:
    """Decode `path` to mono float32 at its own sample rate, as `librosa.load(path, sr=None)` does.

    libsndfile (soundfile) reads WAV/FLAC/OGG exactly like librosa; anything else (mp3, m4a, video) goes
    through ffmpeg into a float WAV at the stream's own rate. Multi-channel audio is averaged to mono.
    """
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise InputError(path, "audio file not found")
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception:
        data, sr = _decode_with_ffmpeg(path)
    if data.shape[0] == 0:
        raise InputError(path, "audio file holds no samples")
    # librosa.to_mono: mean over channels, in float32
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    return np.ascontiguousarray(mono, dtype=np.float32), int(sr)


def _decode_with_ffmpeg(path: Path) -> tuple[np.ndarray, int]:
    import soundfile as sf

    from fasttts_cli.media.ffmpeg import run_ffmpeg

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "decoded.wav"
        try:
            run_ffmpeg(["-i", str(path), "-vn", "-c:a", "pcm_f32le", str(out)], what=f"decoding {path}")
        except (OSError, subprocess.SubprocessError) as e:
            raise InputError(path, f"cannot decode audio: {e}") from None
        except Exception as e:  # FastTTSError from ffmpeg: the file itself is unreadable
            raise InputError(path, f"cannot decode audio: {e}") from None
        data, sr = sf.read(str(out), dtype="float32", always_2d=True)
    return data, sr


# ------------------------------------------------------------------------------------------- resampling


def resample_soxr(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """librosa.resample(res_type="soxr_hq"): soxr HQ, then length fixed to ceil(n * sr_out / sr_in)."""
    x = np.asarray(x, dtype=np.float32)
    if sr_in == sr_out:
        return x.copy()
    y = soxr.resample(x, sr_in, sr_out, quality="HQ")
    n = math.ceil(x.shape[-1] * (float(sr_out) / sr_in))
    if y.shape[-1] > n:
        y = y[..., :n]
    elif y.shape[-1] < n:
        y = np.concatenate([y, np.zeros(n - y.shape[-1], dtype=y.dtype)])
    return np.ascontiguousarray(y, dtype=np.float32)


def sinc_resample_kernel(
    sr_in: int, sr_out: int, lowpass_filter_width: int = 6, rolloff: float = 0.99
) -> tuple[np.ndarray, int, int, int]:
    """Polyphase Hann-windowed sinc kernel as torchaudio's `sinc_interp_hann` builds it.

    Returns (kernel (new, 2*width + orig), width, orig, new) with orig/new the rates divided by their gcd:
    output sample j*new + p of block j is the dot product of kernel[p] with the input from j*orig - width.
    """
    g = math.gcd(int(sr_in), int(sr_out))
    orig, new = int(sr_in) // g, int(sr_out) // g
    base = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base)
    idx = np.arange(-width, width + orig, dtype=np.float64) / orig
    t = (-np.arange(new, dtype=np.float64) / new)[:, None] + idx[None, :]
    t = np.clip(t * base, -lowpass_filter_width, lowpass_filter_width)
    window = np.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    t = t * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(t == 0, 1.0, np.sin(t) / np.where(t == 0, 1.0, t))
    k = k * window * (base / orig)
    # torchaudio builds the kernel in float64 and stores it as float32 before convolving
    return k.astype(np.float32).astype(np.float64), width, orig, new


def resample_sinc(
    x: np.ndarray, sr_in: int, sr_out: int, lowpass_filter_width: int = 6, rolloff: float = 0.99
) -> np.ndarray:
    """torchaudio.functional.resample(x, sr_in, sr_out) (sinc_interp_hann) for a 1-D signal.

    Same zero padding (width left, width + orig right), same stride-`orig` correlation and the same output
    length ceil(n * new / orig); computed in float64, so it differs from torchaudio's float32 convolution
    only by float32 rounding.
    """
    x = np.asarray(x, dtype=np.float64)
    if sr_in == sr_out:
        return x.astype(np.float32)
    kernel, width, orig, new = sinc_resample_kernel(sr_in, sr_out, lowpass_filter_width, rolloff)
    n = x.shape[-1]
    padded = np.pad(x, (width, width + orig))
    blocks = sliding_window_view(padded, kernel.shape[1])[::orig]  # (n_blocks, 2w + orig)
    out = (blocks @ kernel.T).reshape(-1)  # block j gives outputs j*new .. j*new + new - 1
    target = math.ceil(new * n / orig)
    return out[:target].astype(np.float32)


# ------------------------------------------------------------------------------------------ audio paths


@dataclass(frozen=True)
class SpeakerAudio:
    """Stage 1.1: the speaker prompt at both model rates (1-D float32)."""

    audio_22k: np.ndarray  # (N22,) CFM prompt mel domain
    audio_16k: np.ndarray  # (N16,) w2v-BERT and CAMPPlus domain


def speaker_audio_from_array(x: np.ndarray, sr: int, max_seconds: float = MAX_PROMPT_SECONDS) -> SpeakerAudio:
    a22 = resample_soxr(x, sr, SR_MEL)
    a22 = a22[: int(max_seconds * SR_MEL)]
    return SpeakerAudio(audio_22k=a22, audio_16k=resample_sinc(a22, SR_MEL, SR_W2V))


def load_speaker_audio(path: Path | str, max_seconds: float = MAX_PROMPT_SECONDS) -> SpeakerAudio:
    """librosa.load(path, sr=22050) (soxr HQ), cut to `max_seconds`, then torchaudio sinc to 16 kHz."""
    x, sr = load_audio_native(path)
    return speaker_audio_from_array(x, sr, max_seconds)


def emotion_audio_from_array(x: np.ndarray, sr: int, max_seconds: float = MAX_PROMPT_SECONDS) -> np.ndarray:
    return resample_soxr(x, sr, SR_W2V)[: int(max_seconds * SR_W2V)]


def load_emotion_audio(path: Path | str, max_seconds: float = MAX_PROMPT_SECONDS) -> np.ndarray:
    """Stage 1.8: librosa.load(path, sr=16000): soxr HQ straight to 16 kHz, cut to `max_seconds`."""
    x, sr = load_audio_native(path)
    return emotion_audio_from_array(x, sr, max_seconds)


# --------------------------------------------------------------------------------- Kaldi-style framing


def _kaldi_mel_banks(n_mels: int, n_fft: int, sr: int, low: float, high: float) -> np.ndarray:
    """Triangles equally spaced on the Kaldi mel scale 1127 ln(1 + f/700), unnormalised: (n_fft//2+1, n_mels).

    The Nyquist bin gets weight 0, as in Kaldi/torchaudio (it lies on the last triangle's right edge).
    """

    def mel(f: np.ndarray | float) -> np.ndarray:
        return 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)

    edges = np.linspace(mel(low), mel(high), n_mels + 2)
    fft_mel = mel(np.arange(n_fft // 2 + 1) * (sr / n_fft))
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    up = (fft_mel[:, None] - left) / (center - left)
    down = (right - fft_mel[:, None]) / (right - center)
    banks = np.maximum(0.0, np.minimum(up, down))
    banks[n_fft // 2 :] = 0.0
    return banks


def _povey_window(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2.0 * math.pi * np.arange(n) / (n - 1))) ** 0.85


_FRAME, _HOP, _NFFT = 400, 160, 512  # 25 ms, 10 ms, next power of two at 16 kHz
_KALDI_BANKS = _kaldi_mel_banks(80, _NFFT, SR_W2V, 20.0, SR_W2V / 2)
_POVEY = _povey_window(_FRAME)


def _kaldi_power_frames(x: np.ndarray, complex64: bool) -> np.ndarray:
    """Snip-edges frames -> DC removal -> pre-emphasis 0.97 (first sample x0*(1-0.97)) -> Povey -> |FFT|^2."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] < _FRAME:
        return np.zeros((0, _NFFT // 2 + 1))
    frames = sliding_window_view(x, _FRAME)[::_HOP].copy()
    frames -= frames.mean(axis=1, keepdims=True)
    frames[:, 1:] -= 0.97 * frames[:, :-1].copy()
    frames[:, 0] *= 1.0 - 0.97
    frames *= _POVEY
    spec = np.fft.rfft(frames, n=_NFFT, axis=1)
    if complex64:  # transformers stores the FFT in a complex64 buffer before taking |.|^2 in float64
        spec = spec.astype(np.complex64)
    return np.abs(spec).astype(np.float64) ** 2


def kaldi_fbank(audio_16k: np.ndarray) -> np.ndarray:
    """torchaudio.compliance.kaldi.fbank(x[None], num_mel_bins=80, dither=0, sample_frequency=16000).

    (F, 80) float32, F = 1 + (N - 400) // 160; no int16 scaling (the original feeds [-1, 1] audio).
    """
    power = _kaldi_power_frames(audio_16k, complex64=False)
    eps = float(np.finfo(np.float32).eps)
    return np.log(np.maximum(power @ _KALDI_BANKS, eps)).astype(np.float32)


def campplus_fbank(audio_16k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1.6: (raw fbank, fbank minus its per-bin mean over time), both (F, 80) float32."""
    raw = kaldi_fbank(audio_16k)
    cmn = raw.astype(np.float64)
    cmn = (cmn - cmn.mean(axis=0, keepdims=True)).astype(np.float32)
    return raw, cmn


# ----------------------------------------------------------------------------- SeamlessM4T (w2v-BERT)


def seamless_fbank(audio_16k: np.ndarray) -> np.ndarray:
    """SeamlessM4TFeatureExtractor's per-utterance features before padding: (F, 80) float32.

    Audio scaled by 2^15, Kaldi fbank with the mel floor 1.192092955078125e-07, then per mel bin
    (x - mean) / sqrt(var_ddof1 + 1e-7) over time.
    """
    x = np.asarray(audio_16k, dtype=np.float32) * np.float32(2**15)
    power = _kaldi_power_frames(x, complex64=True)
    logmel = np.log(np.maximum(power @ _KALDI_BANKS, 1.192092955078125e-07)).astype(np.float32)
    f = logmel.astype(np.float64)
    # with one frame the ddof=1 variance is undefined (nan), as in the original
    var = np.full((1, f.shape[1]), np.nan) if f.shape[0] < 2 else f.var(axis=0, ddof=1, keepdims=True)
    return ((f - f.mean(axis=0, keepdims=True)) / np.sqrt(var + 1e-7)).astype(np.float32)


def w2v_bert_features(
    audios_16k: list[np.ndarray] | np.ndarray, padding_value: float = 1.0, stride: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """`SeamlessM4TFeatureExtractor(audios, sampling_rate=16000)`: (input_features, attention_mask).

    input_features (B, T, 80*stride) float32 and attention_mask (B, T) int64, T = ceil(max F / 2). Rows
    are padded to the longest (rounded up to a multiple of `stride`) with `padding_value` (1.0 in the
    w2v-bert-2.0 preprocessor config); a stacked pair's mask is that of its second (odd-indexed) frame.
    Passing one 1-D array gives B = 1.
    """
    if isinstance(audios_16k, np.ndarray) and audios_16k.ndim == 1:
        audios_16k = [audios_16k]
    feats = [seamless_fbank(a) for a in audios_16k]
    n_bins = _KALDI_BANKS.shape[1]
    longest = max(f.shape[0] for f in feats)
    frames = -(-longest // stride) * stride
    batch = np.full((len(feats), frames, n_bins), padding_value, dtype=np.float32)
    mask = np.zeros((len(feats), frames), dtype=np.int64)
    for i, f in enumerate(feats):
        batch[i, : f.shape[0]] = f
        mask[i, : f.shape[0]] = 1
    t = frames // stride
    return batch.reshape(len(feats), t, n_bins * stride), np.ascontiguousarray(mask[:, stride - 1 :: stride])


# ------------------------------------------------------------------------------------ 22.05 kHz log-mel


def _hz_to_mel_slaney(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    safe = np.maximum(f, min_log_hz)
    return np.where(f >= min_log_hz, min_log_mel + np.log(safe / min_log_hz) / logstep, f / f_sp)


def _mel_to_hz_slaney(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def slaney_mel_filters(
    sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None
) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax), Slaney scale + area norm: (n_mels, n_fft//2+1)."""
    fmax = sr / 2.0 if fmax is None else float(fmax)
    fft_f = np.fft.rfftfreq(n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(fmin), _hz_to_mel_slaney(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_f[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    w = np.maximum(0.0, np.minimum(lower, upper)).astype(np.float32)  # librosa holds them in float32
    enorm = (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])).astype(np.float32)
    return (w * enorm[:, None]).astype(np.float64)


@dataclass(frozen=True)
class MelParams(SpectConfig):
    """s2mel.preprocess_params (config.yaml): its spect_params (the checkpoint's `SpectConfig`; fmax
    None -> Nyquist) at its sample rate: the CFM prompt mel, matching BigVGAN's training mel."""

    sr: int = SR_MEL

    @classmethod
    def from_config(cls, s2mel_cfg: dict) -> MelParams:
        """From config.yaml's s2mel section (preprocess_params.spect_params); the release's where absent."""
        pp = s2mel_cfg.get("preprocess_params", {})
        sp = pp.get("spect_params", {})
        d = RELEASE_MEL
        return cls(
            sr=int(pp.get("sr", d.sr)),
            n_fft=int(sp.get("n_fft", d.n_fft)),
            win_length=int(sp.get("win_length", d.win_length)),
            hop_length=int(sp.get("hop_length", d.hop_length)),
            n_mels=int(sp.get("n_mels", d.n_mels)),
            fmin=float(sp.get("fmin", 0) or 0),
            fmax=_none_or_float(sp.get("fmax")),
        )

    @classmethod
    def from_manifest(cls, s2: dict) -> MelParams:
        """From an engine manifest's flat `config.s2mel` (export.model_constants)."""
        return cls(
            sr=int(s2["sr"]),
            n_fft=int(s2["n_fft"]),
            win_length=int(s2["win_length"]),
            hop_length=int(s2["hop_length"]),
            n_mels=int(s2["n_mels"]),
            fmin=float(s2.get("fmin") or 0.0),
            fmax=_none_or_float(s2.get("fmax")),
        )


# the released checkpoint's (config.yaml s2mel.preprocess_params)
RELEASE_MEL = MelParams(n_fft=1024, win_length=1024, hop_length=256, n_mels=80)


def _none_or_float(v: object) -> float | None:
    """A config's fmax: None (Nyquist) however YAML / JSON spelt it, else a number."""
    return None if v in (None, "None", "none", "null") else float(v)  # type: ignore[arg-type]


def log_mel(audio_22k: np.ndarray, p: MelParams | None = None) -> np.ndarray:
    """Stage 1.5, the original's `mel_spectrogram(..., center=False)`: (n_mels, floor(N / hop)) float32.

    Reflect-pad (n_fft - hop) / 2 each side, periodic Hann STFT without centering, magnitude
    sqrt(re^2 + im^2 + 1e-9), Slaney mel filters, log(max(x, 1e-5)).
    """
    p = p or RELEASE_MEL
    x = np.asarray(audio_22k, dtype=np.float64)
    pad = int((p.n_fft - p.hop_length) / 2)
    x = np.pad(x, (pad, pad), mode="reflect")
    window = np.zeros(p.n_fft)
    off = (p.n_fft - p.win_length) // 2  # torch.stft centres a shorter window inside n_fft
    window[off : off + p.win_length] = 0.5 - 0.5 * np.cos(
        2.0 * math.pi * np.arange(p.win_length) / p.win_length
    )
    frames = sliding_window_view(x, p.n_fft)[:: p.hop_length] * window
    spec = np.fft.rfft(frames, axis=1)
    mag = np.sqrt(spec.real**2 + spec.imag**2 + 1e-9)
    mel = slaney_mel_filters(p.sr, p.n_fft, p.n_mels, p.fmin, p.fmax) @ mag.T
    return np.log(np.maximum(mel, 1e-5)).astype(np.float32)
