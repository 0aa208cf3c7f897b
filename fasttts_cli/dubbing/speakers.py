"""Speaker -> reference voice mapping from `--voice PATH` (default voice) and `--voice NAME=PATH` flags.

Speaker names match case-insensitively after stripping spaces ("Alice", " ALICE " and "alice" are one
speaker), because the same script often spells a name differently across tools.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.errors import InputError, UsageError

VOICE_HINT = "--voice NAME=PATH for each speaker, or --voice PATH for a default voice"
# `--voice from-video` / `--voice NAME=from-video`: the reference is cut from the source audio (casting/).
# Only this exact spelling: a file of that name is given as ./from-video.
FROM_VIDEO = "from-video"


def speaker_key(name: str | None) -> str | None:
    """The comparison key of a speaker name; None for no speaker (None or blank)."""
    if name is None or not name.strip():
        return None
    return " ".join(name.split()).casefold()


@dataclass(frozen=True)
class VoiceMap:
    default: Path | None
    named: dict[str, Path] = field(default_factory=dict)
    # Speakers whose reference is cut from the source audio: names given as NAME=from-video, and None for
    # `--voice from-video` (every speaker without a voice of its own). Not in `named` until it is built.
    from_video: tuple[str | None, ...] = ()

    def lookup(self, speaker: str | None) -> Path | None:
        """The voice for `speaker` (its own, else the default), or None when there is none."""
        key = speaker_key(speaker)
        if key is not None:
            for name, path in self.named.items():
                if speaker_key(name) == key:
                    return path
        return self.default

    def resolve(self, speaker: str | None) -> Path:
        """Like lookup, but a missing voice is a UsageError naming the speaker and the voices given."""
        path = self.lookup(speaker)
        if path is not None:
            return path
        given = ", ".join(sorted(self.named)) or "none"
        who = f"speaker {speaker.strip()!r}" if speaker_key(speaker) else "lines without a speaker"
        raise UsageError(f"no voice for {who} (named voices given: {given})", hint=VOICE_HINT)


def parse_voice_flags(values: Iterable[str]) -> VoiceMap:
    """Parse repeated `--voice` values: `PATH` sets the default voice, `NAME=PATH` a speaker's voice, and
    `from-video` / `NAME=from-video` asks for a reference cut from the source audio (VoiceMap.from_video).

    A value that is an existing file is a path even if it contains '=' (so `a=b.wav` still works); otherwise
    the first '=' splits name and path. Missing files are an InputError naming the flag value.
    """
    default: Path | None = None
    named: dict[str, Path] = {}
    from_video: list[str | None] = []
    given: dict[str | None, str] = {}  # speaker key -> what it was given, for the clash message
    for value in values:
        raw = value.strip()
        name: str | None = None
        path_text = raw
        if "=" in raw and not Path(raw).expanduser().is_file():
            name, path_text = (part.strip() for part in raw.split("=", 1))
            if not name:
                raise UsageError(f"--voice {value}: the name before '=' is empty", hint=VOICE_HINT)
        if not path_text:
            raise UsageError(f"--voice {value}: no file given", hint=VOICE_HINT)
        if name is not None:
            key = speaker_key(name)
            clash = next((n for n in [*named, *(f for f in from_video if f)] if speaker_key(n) == key), None)
            if clash is not None:
                raise UsageError(f"--voice {value}: speaker {clash!r} already has a voice ({given[key]})")
        if path_text == FROM_VIDEO:
            if name is None and None in from_video:
                raise UsageError(f"--voice {value}: given twice")
            from_video.append(name)
            given[speaker_key(name)] = FROM_VIDEO
            continue
        path = Path(path_text).expanduser()
        if not path.exists() or not path.is_file():
            who = f"speaker {name}'s" if name is not None else "the default"
            what = "not found" if not path.exists() else "is not a file"
            raise InputError(
                f"--voice {value}",
                f"{who} voice file {str(path)!r} {what}",
                hint="fix the path to the reference audio (a relative path is read from the folder "
                f"fasttts runs in, {Path.cwd()}), or give that speaker another recording",
            )
        if name is None:
            if default is not None:
                raise UsageError(
                    f"--voice {value}: a default voice was already given ({default})",
                    hint="give only one --voice PATH; name the others as --voice NAME=PATH",
                )
            default = path
            continue
        named[name] = path
        given[speaker_key(name)] = str(path)
    return VoiceMap(default=default, named=named, from_video=tuple(from_video))


def speakers_found(cues: Iterable[Cue]) -> dict[str | None, tuple[str | None, int]]:
    """speaker key -> (spelling first seen, number of cues), in order of first appearance."""
    found: dict[str | None, tuple[str | None, int]] = {}
    for c in cues:
        key = speaker_key(c.speaker)
        name, count = found.get(key, (c.speaker.strip() if key else None, 0))
        found[key] = (name, count + 1)
    return found


def check_voices(cues: list[Cue], vm: VoiceMap) -> None:
    """UsageError when some cue has no voice, listing every speaker found and which have voices."""
    found = speakers_found(cues)
    missing = [k for k in found if vm.lookup(found[k][0]) is None]
    if not missing:
        return
    listing = []
    for key, (name, count) in found.items():
        label = name if key is not None else "(no speaker)"
        voice = vm.lookup(name)
        status = f"voice {voice}" if voice is not None else "NO VOICE"
        listing.append(f"{label}: {count} line{'s' if count != 1 else ''}, {status}")
    missing_names = ", ".join(found[k][0] or "(lines without a speaker)" for k in missing)
    raise UsageError(
        f"no voice for {missing_names}. Speakers found: " + "; ".join(listing),
        hint=VOICE_HINT,
    )


def unused_voices(cues: Iterable[Cue], vm: VoiceMap) -> list[str]:
    """Named voices that match no speaker in the cues (likely a typo in --voice NAME=...); for a warning."""
    keys = set(speakers_found(cues))
    return [name for name in vm.named if speaker_key(name) not in keys]


def voice_name_problems(cues: Iterable[Cue], vm: VoiceMap) -> list[str]:
    """One message per `--voice NAME=` that matches no speaker, naming the closest speaker found: a typo
    there is silent otherwise (the speaker falls back to the default voice, or to no voice at all)."""
    found = speakers_found(cues)
    names = {key: name for key, (name, _) in found.items() if key is not None and name is not None}
    problems = []
    for given in unused_voices(cues, vm):
        close = difflib.get_close_matches(speaker_key(given) or "", list(names), n=1, cutoff=0.6)
        if close:
            target = names[close[0]]
            fallback = f"the default voice {vm.default}" if vm.default else "no voice of its own"
            suggestion = f"; the closest speaker is {target!r}, which gets {fallback}"
        elif names:
            suggestion = f"; speakers found: {', '.join(sorted(names.values())[:12])}"
        else:
            suggestion = "; the script names no speakers"
        problems.append(f"--voice {given}=...: no speaker {given!r} in the script{suggestion}")
    return problems


def with_placeholder_voices(cues: Iterable[Cue], vm: VoiceMap) -> tuple[VoiceMap, set[Path]]:
    """`vm` plus a stand-in path for every speaker with no voice, and the set of stand-ins: lets `inspect`
    plan and batch a script before any voice is chosen (the stand-ins are never opened)."""
    named = dict(vm.named)
    default = vm.default
    stand_ins: set[Path] = set()
    for key, (name, _) in speakers_found(cues).items():
        if vm.lookup(name) is not None:
            continue
        if key is None:
            default = Path("(no voice: lines without a speaker)")
            stand_ins.add(default)
        else:
            named[name or key] = Path(f"(no voice: {name})")
            stand_ins.add(named[name or key])
    return VoiceMap(default=default, named=named), stand_ins
