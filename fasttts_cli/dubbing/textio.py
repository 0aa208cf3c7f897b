"""Read a user's text file as Unicode, or fail with a message that says where and how to fix it.

Accepted by default: UTF-8 (with or without BOM) and UTF-16 LE/BE with a BOM. Legacy encodings are read
only when the user names one (`--encoding cp1252`): a guess that is wrong (cp1250 for cp1252 text, say)
silently turns into mojibake that then gets spoken aloud, which is worse than stopping. So the guess of
charset-normalizer is only offered in the error's hint, with the flag to pass.
"""

from __future__ import annotations

import codecs
import sys
from pathlib import Path

from fasttts_cli.errors import InputError, UsageError

STDIN = "-"

_HINT_UTF8 = "re-save the file as UTF-8 (for example: iconv -f cp1252 -t utf-8 IN > OUT)"


def read_bytes(path: Path | str) -> bytes:
    """The raw bytes of `path` (`-` = standard input); InputError when missing or unreadable."""
    if str(path) == STDIN:
        return sys.stdin.buffer.read()
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise InputError(p, "file not found") from None
    except IsADirectoryError:
        raise InputError(p, "is a directory, expected a file") from None
    except PermissionError:
        raise InputError(p, "cannot read the file: permission denied") from None
    except OSError as e:
        raise InputError(p, f"cannot read the file: {e.strerror or e}") from None


def decode_text(data: bytes, path: Path | str) -> str:
    """Decode bytes per the module rules; newlines normalized to `\\n`, BOM removed."""
    # UTF-32 BOMs must be tested before UTF-16: FF FE 00 00 also starts with the UTF-16 LE BOM.
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise InputError(path, "is UTF-32 encoded, which is not supported", hint=_HINT_UTF8)
    if data.startswith(codecs.BOM_UTF8):
        text = _decode(data, len(codecs.BOM_UTF8), "utf-8", path)
    elif data.startswith(codecs.BOM_UTF16_LE):
        text = _decode(data, 2, "utf-16-le", path)
    elif data.startswith(codecs.BOM_UTF16_BE):
        text = _decode(data, 2, "utf-16-be", path)
    else:
        text = _decode(data, 0, "utf-8", path)
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise InputError(
            path,
            "contains NUL characters: this is a binary file, or UTF-16 text without a byte-order mark",
            line=line,
            hint=_encoding_hint(data),
        )
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_encoding(name: str | None) -> str | None:
    """The codec name of `--encoding NAME` (any name Python knows), or None; UsageError naming the flag."""
    if name is None:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        raise UsageError(
            f"--encoding {name}: unknown encoding",
            hint="use a Python codec name such as cp1252, latin-1, gb18030, shift_jis, utf-16",
        ) from None


def read_text(path: Path | str, encoding: str | None = None) -> str:
    """Read a text file (see module doc), in `encoding` when given. Raises InputError naming the file
    (and line/byte on bad bytes); UsageError for an unknown `encoding`."""
    data = read_bytes(path)
    codec = check_encoding(encoding)
    if codec is None:
        return decode_text(data, path)
    text = _decode(data, 0, codec, path).lstrip("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes, skip: int, encoding: str, path: Path | str) -> str:
    try:
        return data[skip:].decode(encoding)
    except UnicodeDecodeError as e:
        offset = skip + e.start
        bad = data[offset : offset + min(4, e.end - e.start)]
        line = data[skip:offset].decode(encoding, errors="replace").count("\n") + 1
        what = {"utf-8": "UTF-8", "utf-16-le": "UTF-16", "utf-16-be": "UTF-16"}.get(encoding, encoding)
        raise InputError(
            path,
            f"not valid {what} text at byte {offset} (bytes {bad.hex(' ')})",
            line=line,
            hint=_encoding_hint(data) if skip == 0 else _HINT_UTF8,
        ) from None


# When charset-normalizer cannot tell candidates apart (short text scores them all alike), the one that
# subtitle files most often use wins: cp1252 text is read as cp1250 otherwise ("è" -> "č").
_COMMON = ("cp1252", "gb18030", "big5", "shift_jis", "cp932", "euc_kr", "cp949", "cp1251", "cp1250", "cp1256")


# Latin-script single-byte codecs, for text whose high bytes are sparse accents among ASCII letters.
_LATIN = ["cp1252", "cp1250", "cp1254", "cp1257", "latin_1", "iso8859_2", "iso8859_15"]


def guess_encodings(data: bytes) -> list[str]:
    """charset-normalizer's guesses at the encoding of `data` (Python codec names), likeliest first."""
    from charset_normalizer import from_bytes

    sample = data[:200_000]
    high = sum(1 for b in sample if b >= 0x80)
    letters = sum(1 for b in sample if 65 <= b <= 90 or 97 <= b <= 122)
    # A few accents among many ASCII letters is Latin text; charset-normalizer alone then often calls it
    # Big5 or GB18030, since two neighbouring high bytes ("é" + "t") also form a valid CJK character.
    latin = high > 0 and high < 0.3 * (high + letters)
    results = list(from_bytes(sample, cp_isolation=_LATIN)) if latin else []
    results = results or list(from_bytes(sample))
    if not results:
        return []
    top = (results[0].chaos, -results[0].coherence)
    tied = [m for m in results if (m.chaos, -m.coherence) == top]
    rank = {name: i for i, name in enumerate(_COMMON)}

    def order(m: object) -> int:
        names = [m.encoding, *m.could_be_from_charset]  # type: ignore[attr-defined]
        return min((rank[n] for n in names if n in rank), default=len(rank))

    tied.sort(key=order)
    out = [m.encoding for m in tied]
    if out and order(tied[0]) < len(rank):  # name the common codec, not its alias group's first member
        names = [tied[0].encoding, *tied[0].could_be_from_charset]
        out[0] = min((n for n in names if n in rank), key=rank.__getitem__)
    return out


def _encoding_hint(data: bytes) -> str:
    guesses = [g.replace("_", "-") for g in guess_encodings(data) if g not in ("utf_8", "ascii")]
    if not guesses:
        return _HINT_UTF8
    name, others = guesses[0], guesses[1:3]
    alt = f" (or {', '.join(others)})" if others else ""
    return f"it looks like {name}{alt}; pass --encoding {name}, or {_HINT_UTF8}"
