"""Read a user's text file as Unicode, or fail with a message that says where and how to fix it.

Accepted: UTF-8 (with or without BOM) and UTF-16 LE/BE with a BOM. We do not guess legacy encodings:
a cp1252 file that happens to decode as latin-1 would silently turn into mojibake that then gets
spoken aloud, which is worse than stopping with the byte offset of the first bad byte.
"""

from __future__ import annotations

import codecs
import sys
from pathlib import Path

from .errors import InputError

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
            hint=_HINT_UTF8,
        )
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: Path | str) -> str:
    """Read a text file (see module doc). Raises InputError naming the file (and line/byte on bad bytes)."""
    return decode_text(read_bytes(path), path)


def _decode(data: bytes, skip: int, encoding: str, path: Path | str) -> str:
    try:
        return data[skip:].decode(encoding)
    except UnicodeDecodeError as e:
        offset = skip + e.start
        bad = data[offset : offset + min(4, e.end - e.start)]
        line = data[skip:offset].decode(encoding, errors="replace").count("\n") + 1
        what = "UTF-8" if encoding == "utf-8" else "UTF-16"
        guess = ""
        if encoding == "utf-8" and _looks_single_byte(data[skip:]):
            guess = " (it looks like a Windows-1252/Latin-1 file)"
        raise InputError(
            path,
            f"not valid {what} text at byte {offset} (bytes {bad.hex(' ')}){guess}",
            line=line,
            hint=_HINT_UTF8,
        ) from None


def _looks_single_byte(data: bytes) -> bool:
    # High bytes that are not part of any valid UTF-8 sequence and no NULs: typical of cp1252/latin-1 text.
    return b"\x00" not in data and any(b >= 0x80 for b in data)
