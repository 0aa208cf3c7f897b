"""tiktoken rank files (2.5's `multilingual_zh_ja_yue_char_del.tiktoken`, delta §2.3) and the tiny one.

Format: one `base64(token) rank` pair per line (what tiktoken's `load_tiktoken_bpe` reads). The encoding
adds N_SPECIAL special tokens after the R ranks, so ids run up to R + N_SPECIAL - 1 and the GPT's text
table needs at least R + N_SPECIAL rows.

The tiny vocabulary (delta §13.2 option (a)) has the 256 single bytes in GPT-2's byte order, so that
`!` = 0 and `"` = 1 as in the real file (the id 0/1 strip quirk is exercised), then merges that make
TINY_WORDS single tokens, each built as its prefix chain (t[:2], t[:3], ..., t), so every multi-byte token
is the merge of two lower-ranked ones, and byte-pair merging of a piece equal to a word always ends in the
word (the first part of the piece is a prefix, and it plus its neighbour is again a prefix).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from pathlib import Path

from fasttts_cli.errors import InputError

TOKENIZER_FILE = "multilingual_zh_ja_yue_char_del.tiktoken"
# endoftext, startoftranscript, 99 languages, 11 audio events, 4 emotions, 6 task tokens, 30
# SPECIAL_TOKEN_n, 20 TTS tokens, 1501 timestamps (delta §2.3)
N_SPECIAL = 2 + 99 + 11 + 4 + 6 + 30 + 20 + 1501

# Lower-case English (2.5 lower-cases en/zh/ja), upper-case Spanish (es is upper-cased), single CJK
# characters, kana and Arabic letters; each also with the leading space the language prefix leaves.
TINY_WORDS = (
    *("hello", "world", "this", "is", "a", "test", "the", "minute", "time", "good", "morning", "you"),
    *("HOLA", "MUNDO", "BUENOS", "DIAS"),
    *"你好世界我们行中文今天",
    *"こんにちはじょうずカタ",
    *"مرحبا",
)


def gpt2_byte_order() -> list[int]:
    """The 256 byte values in GPT-2's `bytes_to_unicode` order: the printable ones (! .. ~, ¡ .. ¬,
    ® .. ÿ) first, then the rest ascending; byte 32 (space) lands at 220."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    first = set(printable)
    return printable + [b for b in range(256) if b not in first]


def tiny_ranks(words: Iterable[str] = TINY_WORDS) -> list[bytes]:
    """Tokens in rank order: the single bytes, then each word's (and " " + word's) prefix chain."""
    tokens = [bytes([b]) for b in gpt2_byte_order()]
    seen = set(tokens)
    for word in words:
        for text in (word, " " + word):
            raw = text.encode("utf-8")
            for end in range(2, len(raw) + 1):
                if raw[:end] not in seen:
                    seen.add(raw[:end])
                    tokens.append(raw[:end])
    return tokens


def tiktoken_text(tokens: list[bytes]) -> str:
    return "".join(f"{base64.b64encode(t).decode('ascii')} {rank}\n" for rank, t in enumerate(tokens))


def write_tiktoken(path: Path, tokens: list[bytes]) -> None:
    path.write_text(tiktoken_text(tokens), encoding="ascii")


def read_tiktoken(path: Path) -> list[bytes]:
    """Tokens in rank order; the ranks must be 0..R-1, each once, the tokens distinct (InputError naming
    the file and line otherwise)."""
    if not path.is_file():
        raise InputError(path, "file not found")
    by_rank: dict[int, bytes] = {}
    seen: set[bytes] = set()
    for n, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
        except (ValueError, binascii.Error):
            raise InputError(path, f"line {n}: expected `base64(token) rank`") from None
        if rank in by_rank or token in seen:
            raise InputError(path, f"line {n}: rank {rank} or its token appears twice")
        by_rank[rank] = token
        seen.add(token)
    if sorted(by_rank) != list(range(len(by_rank))):
        raise InputError(path, f"ranks are not 0..{len(by_rank) - 1}")
    if not by_rank:
        raise InputError(path, "no ranks")
    return [by_rank[r] for r in range(len(by_rank))]
