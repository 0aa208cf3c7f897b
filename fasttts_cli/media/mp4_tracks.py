"""Clear the 'enabled' flag of an MP4/MOV track in place.

ffmpeg's MP4 muxer enables the first track of each kind when none is marked default, so a soft-subtitle
track always comes out enabled, which players and ffmpeg read as "default": subtitles on by default, which
a dub must not impose. The flag lives in the track header box (`tkhd`, flags bit 0x1); patching that one
byte touches nothing else in the file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

TEXT_HANDLERS = frozenset({b"sbtl", b"text", b"subt"})
_ENABLED = 0x01


def _boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int, int]]:
    """(type, box start, payload start, box end) of the boxes in data[start:end]."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, pos)
        head = 8
        if size == 1:
            if pos + 16 > end:
                return
            size = struct.unpack_from(">Q", data, pos + 8)[0]
            head = 16
        elif size == 0:
            size = end - pos
        if size < head or pos + size > end:
            return  # damaged: stop rather than guess
        yield kind, pos, pos + head, pos + size
        pos += size


def _find_moov(path: Path) -> tuple[int, bytes] | None:
    """(file offset, bytes) of the top-level moov box, reading only box headers until it is found."""
    total = path.stat().st_size
    with path.open("rb") as f:
        offset = 0
        while offset < total:
            f.seek(offset)
            head = f.read(16)
            if len(head) < 8:
                return None
            size, kind = struct.unpack_from(">I4s", head)
            if size == 1 and len(head) == 16:
                size = struct.unpack_from(">Q", head, 8)[0]
            elif size == 0:
                size = total - offset
            if size < 8 or offset + size > total:
                return None
            if kind == b"moov":
                f.seek(offset)
                return offset, f.read(size)
            offset += size
    return None


def disable_tracks(path: Path, handlers: frozenset[bytes] = TEXT_HANDLERS) -> int:
    """Clear the enabled flag of every track whose handler type is in `handlers`; returns how many."""
    found = _find_moov(Path(path))
    if found is None:
        return 0
    base, moov = found
    patches: list[int] = []
    for kind, _, body, end in _boxes(moov, 0, len(moov)):
        if kind != b"moov":
            continue
        for tkind, _, tbody, tend in _boxes(moov, body, end):
            if tkind != b"trak":
                continue
            tkhd_flags = None
            handler = None
            for ckind, _, cbody, cend in _boxes(moov, tbody, tend):
                if ckind == b"tkhd" and cbody + 4 <= cend:
                    tkhd_flags = cbody + 3  # version (1 byte), flags (3 bytes, big-endian): the low byte
                elif ckind == b"mdia":
                    for mkind, _, mbody, mend in _boxes(moov, cbody, cend):
                        if mkind == b"hdlr" and mbody + 12 <= mend:
                            handler = moov[mbody + 8 : mbody + 12]
            if tkhd_flags is not None and handler in handlers and moov[tkhd_flags] & _ENABLED:
                patches.append(tkhd_flags)
    if patches:
        with Path(path).open("r+b") as f:
            for at in patches:
                f.seek(base + at)
                f.write(bytes([moov[at] & ~_ENABLED & 0xFF]))
    return len(patches)
