"""Functional stand-in for `whisper.tokenizer.Tokenizer` (delta spec section 13.2, item 1).

IndexTTS-2.5's `WhisperTokenizer` subclasses it and calls `super().__init__(encoding=..., num_languages=...,
language=..., task=...)`; inference then only calls `encode`/`decode`, which the real class forwards to the
tiktoken encoding unchanged. The real class also precomputes special-token ids in `__post_init__`; nothing
on the inference path reads them, so they are left out.
"""

from dataclasses import dataclass
from typing import Any


@dataclass
class Tokenizer:
    encoding: Any
    num_languages: int
    language: str | None = None
    task: str | None = None

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        return self.encoding.encode(text, **kwargs)

    def decode(self, token_ids: list[int], **kwargs: Any) -> str:
        return self.encoding.decode(token_ids, **kwargs)
