"""The IndexTTS-2.5 tokenizer: byte-level BPE (tiktoken) over a CosyVoice rank file, Whisper-style specials.

The rank file (`multilingual_zh_ja_yue_char_del.tiktoken`, one `base64(bytes) rank` pair per line) gives
ids 0..R-1; 1673 special tokens follow at R, R+1, ... in a fixed order (the table below), so every id in
the vocabulary is fixed by the file alone. Languages are the Whisper list plus seven Chinese variants and
`common`; only the first 99 codes are special tokens, and a code outside the list embeds as `common`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path

from fasttts_cli.errors import InputError

# GPT-2 / Whisper pre-tokeniser: contractions, letter runs, digit runs, other runs, whitespace.
PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Order is the language-embedding row (the position) and, for the first 99, the special-token order.
LANGUAGE_CODES: tuple[str, ...] = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id",
    "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg",
    "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br",
    "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so",
    "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt",
    "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su",
    "yue", "minnan", "wuyu", "dialect", "zh/en", "en/zh", "common",
)  # fmt: skip
SPECIAL_LANGUAGES = 99  # num_languages: the codes that are special tokens
LANGUAGE_ROW = {code: i for i, code in enumerate(LANGUAGE_CODES)}
COMMON_ROW = LANGUAGE_ROW["common"]

_AUDIO_EVENTS = ("ASR", "AED", "SER", "Speech", "/Speech", "BGM", "/BGM", "Laughter", "/Laughter",
                 "Applause", "/Applause")  # fmt: skip
_EMOTIONS = ("HAPPY", "SAD", "ANGRY", "NEUTRAL")
_TASKS = ("translate", "transcribe", "startoflm", "startofprev", "nospeech", "notimestamps")
_TTS = ("TTS/B", "TTS/O", "TTS/Q", "TTS/A", "TTS/CO", "TTS/CL", "TTS/H")
_TTS += tuple(f"TTS/SP{i:02d}" for i in range(1, 14))


def special_token_names() -> list[str]:
    """The 1673 specials in id order (id = number of ranks + index)."""
    names = ["endoftext", "startoftranscript", *LANGUAGE_CODES[:SPECIAL_LANGUAGES]]
    names += [*_AUDIO_EVENTS, *_EMOTIONS, *_TASKS, *(f"SPECIAL_TOKEN_{i}" for i in range(1, 31)), *_TTS]
    # the float product, formatted: exactly how the timestamp names were generated
    names += [f"{i * 0.02:.2f}" for i in range(1501)]
    return [f"<|{n}|>" for n in names]


def language_row(lang: str) -> int:
    """The language-embedding row: the code's position in the list, `common` for anything else."""
    return LANGUAGE_ROW.get(lang.lower(), COMMON_ROW)


def read_ranks(path: Path) -> dict[bytes, int]:
    """A tiktoken rank file, checked: every line `base64 rank`, ranks exactly 0..R-1."""
    if not path.is_file():
        raise InputError(path, "tiktoken rank file not found")
    ranks: dict[bytes, int] = {}
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            try:
                token, rank = fields
                # not validated: the CosyVoice file ranks `=`, the empty token, as the original reads it
                ranks[base64.b64decode(token)] = int(rank)
            except (ValueError, binascii.Error):
                raise InputError(path, "not a tiktoken rank file (expected `base64 rank`)", line=n) from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise InputError(path, "tiktoken ranks are not exactly 0..N-1 (duplicate tokens or gaps)")
    return ranks


@dataclass(frozen=True)
class Tokenizer25:
    """`encode` parses every special-token string typed in the text (`allowed_special='all'`)."""

    encoding: object  # tiktoken.Encoding
    n_ranks: int

    @classmethod
    def load(cls, path: Path | str) -> Tokenizer25:
        import tiktoken

        path = Path(path)
        ranks = read_ranks(path)
        specials = {name: len(ranks) + i for i, name in enumerate(special_token_names())}
        encoding = tiktoken.Encoding(
            name=path.name,
            pat_str=PAT_STR,
            mergeable_ranks=ranks,
            special_tokens=specials,
            explicit_n_vocab=len(ranks) + len(specials),
        )
        return cls(encoding, len(ranks))

    @property
    def n_vocab(self) -> int:
        return int(self.encoding.n_vocab)  # type: ignore[attr-defined]

    def encode(self, text: str) -> list[int]:
        return list(self.encoding.encode(text, allowed_special="all"))  # type: ignore[attr-defined]

    def decode(self, ids: list[int]) -> str:
        return str(self.encoding.decode(ids))  # type: ignore[attr-defined]

    def special_id(self, name: str) -> int:
        return int(self.encoding.encode_single_token(name))  # type: ignore[attr-defined]
