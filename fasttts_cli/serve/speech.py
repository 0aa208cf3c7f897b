"""The body of `POST /v1/audio/speech`, checked: OpenAI's fields and fasttts's own; errors name the field.

OpenAI's: `model` (any name /v1/models lists, or any other: there is one engine), `input` (the text, at
most `max_input_chars`), `voice` (a name from the server's voices), `response_format` (wav, pcm, flac,
mp3, opus; default mp3 as OpenAI's), `speed` (0.25-4.0), `stream_format` ("audio" or "sse"),
`instructions` (accepted, not used: IndexTTS-2 takes emotion as audio or a vector). fasttts's: `seed`
(integer; default: from the text and voice, so the same request gives the same audio), `language` (ISO
639), `emotion` (8 numbers in [0, 1]: happy, angry, sad, afraid, disgusted, melancholic, surprised,
calm), `emotion_alpha` (0-1), `duration` (seconds: the line rendered to that length, not streamed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
STREAMED = ("wav", "pcm")  # sent as made; the others are encoded once the line is whole
STREAM_FORMATS = ("audio", "sse")
MODELS = ("fasttts", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
KNOWN = {
    "model",
    "input",
    "voice",
    "response_format",
    "speed",
    "stream_format",
    "instructions",
    "seed",
    "language",
    "emotion",
    "emotion_alpha",
    "duration",
}


class ApiError(Exception):
    """An HTTP error answer: status, message and the request field it is about (OpenAI's error shape)."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


@dataclass(frozen=True)
class Speech:
    """One checked speech request."""

    input: str
    voice: str
    response_format: str = "mp3"
    speed: float = 1.0
    stream_format: str = "audio"
    model: str = "fasttts"
    seed: int | None = None
    language: str | None = None
    emotion: tuple[float, ...] | None = None
    emotion_alpha: float = 1.0
    duration: float | None = None

    @property
    def streamed(self) -> bool:
        """Audio leaves as it is made (wav/pcm, or SSE) at the natural pace."""
        whole = self.speed != 1.0 or self.duration is not None
        return not whole and (self.stream_format == "sse" or self.response_format in STREAMED)


def parse_speech(raw: bytes, voices: set[str], max_input_chars: int) -> Speech:
    """The request body -> Speech; ApiError 400 naming the first bad field."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", "body") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", "body")
    for k in body:
        if k not in KNOWN:
            raise ApiError(400, f"unknown field {k!r} (known: {', '.join(sorted(KNOWN))})", k)
    text = _str(body, "input", required=True)
    if not text.strip():
        raise ApiError(400, "input is empty", "input")
    if len(text) > max_input_chars:
        raise ApiError(
            400, f"input has {len(text)} characters; this server takes at most {max_input_chars}", "input"
        )
    voice = _str(body, "voice", required=True)
    if voice not in voices:
        known = ", ".join(sorted(voices)[:20]) or "(none)"
        raise ApiError(400, f"unknown voice {voice!r} (this server has: {known})", "voice")
    fmt = _choice(body, "response_format", FORMATS, "mp3")
    sfmt = _choice(body, "stream_format", STREAM_FORMATS, "audio")
    speed = _number(body, "speed", 1.0, 0.25, 4.0)
    alpha = _number(body, "emotion_alpha", 1.0, 0.0, 1.0)
    duration = body.get("duration")
    if duration is not None:
        duration = _number(body, "duration", 1.0, 0.05, 600.0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, f"seed must be an integer, got {seed!r}", "seed")
    emotion = body.get("emotion")
    if emotion is not None:
        ok = isinstance(emotion, list) and len(emotion) == 8
        ok = ok and all(
            isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1 for v in emotion
        )
        if not ok:
            raise ApiError(
                400,
                "emotion must be 8 numbers in [0, 1]: happy, angry, sad, afraid, disgusted, melancholic, "
                "surprised, calm",
                "emotion",
            )
        emotion = tuple(float(v) for v in emotion)
    if sfmt == "sse" and fmt not in STREAMED:
        raise ApiError(
            400, "stream_format sse sends pcm or wav audio; ask for response_format pcm", "stream_format"
        )
    return Speech(
        input=text,
        voice=voice,
        response_format=fmt,
        speed=speed,
        stream_format=sfmt,
        model=_str(body, "model", required=False) or "fasttts",
        seed=seed,
        language=_str(body, "language", required=False) or None,
        emotion=emotion,
        emotion_alpha=alpha,
        duration=duration,
    )


def _str(body: dict[str, Any], key: str, *, required: bool) -> str:
    v = body.get(key)
    if v is None:
        if required:
            raise ApiError(400, f"{key} is required", key)
        return ""
    if not isinstance(v, str):
        raise ApiError(400, f"{key} must be a string, got {type(v).__name__}", key)
    return v


def _choice(body: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    v = body.get(key, default)
    if v not in allowed:
        raise ApiError(400, f"{key} {v!r}: one of {', '.join(allowed)}", key)
    return str(v)


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise ApiError(400, f"{key} must be a number from {lo:g} to {hi:g}, got {v!r}", key)
    return float(v)
