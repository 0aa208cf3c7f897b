"""ASS/SSA reader: which events of a real fansub script are dialogue to dub, and why the others are not.

Read line by line (not through pysubs2, which refuses a whole file over one odd line, even a Comment one,
and gives no line numbers). Only the [Events] section is read; its `Format:` line says where each field is.

Every `Dialogue:`/`Comment:` line is accounted for: a cue (spoken, or no_speech when it has no text or no
length), or a skipped event with a reason. Skipped:
- `Comment:` lines, whatever their shape; an empty `Dialogue:` line; Picture/Sound/Movie/Command events;
- vector drawings (`{\\p1}...`) with no text, karaoke (`\\k` tags or a karaoke Effect: fx, karaoke,
  template, code), scrolling effects (Banner, Scroll);
- events whose style is not dialogue. With `--styles A,B` exactly those styles (case-insensitive) are
  dialogue. By default a style is dialogue unless a word of its name (split at spaces, punctuation, case
  and digit changes: "OPRomaji" -> op, romaji) says sign, song or note (see _NON_DIALOGUE); an Actor/Name
  field that says so ("Sign", "TS", "TL Note") also marks the event;
- unnamed events typeset as signs: `\\move`, `\\org`, `\\clip`, rotation or shearing tags, or `\\pos` with a
  non-default `\\an` or other typesetting (font, size, scale, colour, border, blur).
Damage (exit 2): a Dialogue line with too few fields or an unreadable time, a Format line without Start,
End or Text, a file with no [Events] section.
"""

from __future__ import annotations

import re
from pathlib import Path

from fasttts_cli.dubbing.readers_base import TS, FormatRead, RawEvent, display_text, quote, stamp_seconds
from fasttts_cli.errors import InputError

_DEFAULT_FORMAT = {
    "ass": ["layer", "start", "end", "style", "name", "marginl", "marginr", "marginv", "effect", "text"],
    "ssa": ["marked", "start", "end", "style", "name", "marginl", "marginr", "marginv", "effect", "text"],
}
_TIME = re.compile(TS)
_SIGN_WORDS = {"sign", "signs", "ts", "typeset", "typesetting", "screen", "sfx", "logo", "title", "titles"}
_SIGN_WORDS |= {"eptitle", "credit", "credits", "staff", "preview", "eyecatch"}
_SONG_WORDS = {"song", "songs", "lyric", "lyrics", "kara", "karaoke", "op", "ed", "opening", "ending"}
_SONG_WORDS |= {"insert", "romaji", "romanji", "kanji", "furigana", "theme"}
_NOTE_WORDS = {"note", "notes", "tl", "tlnote", "tln"}
_NON_DIALOGUE = {**dict.fromkeys(_SIGN_WORDS, "sign"), **dict.fromkeys(_SONG_WORDS, "song")}
_NON_DIALOGUE |= dict.fromkeys(_NOTE_WORDS, "note")
# An actor named "Ed" or "Op" is a person: only these words in the Name field mark a non-dialogue event.
_NAME_MARKERS = {w: c for w, c in _NON_DIALOGUE.items() if w not in {"op", "ed", "title", "theme", "insert"}}
_OVERRIDE = re.compile(r"\{([^{}]*)\}")
_KARAOKE_TAG = re.compile(r"\\(?:k|K|kf|ko)\d")
_SIGN_TAG = re.compile(r"\\(?:move|org|i?clip|fr[xyz]?-?\d|fa[xy])")
_POS_TAG = re.compile(r"\\pos\s*\(")
_TYPESET_TAG = re.compile(
    r"\\(?:an[013-9]|a(?:[1-35-9]|1[01])\b|fn|fs\d|fsc[xy]?|[1-4]?c&|[1-4]a&|alpha|bord|xbord|ybord|blur|be\d)"
)
_KARAOKE_EFFECT = re.compile(r"\s*(fx|karaoke|template|code)\b", re.I)
_SCROLL_EFFECT = re.compile(r"\s*(banner|scroll)", re.I)


# Chinese fansub style names (no word breaks, so matched inside the name): notes, lyrics, effects, titles.
_CJK_WORDS = {"注释": "note", "注釋": "note", "歌词": "song", "歌詞": "song", "特效": "sign", "标题": "sign"}
_CJK_WORDS |= {"標題": "sign"}


def style_words(name: str) -> list[str]:
    """ "OPRomaji" -> ["op", "romaji"]; "Sign_Top2" -> ["sign", "top", "2"]; "OP日文" -> ["op", "日文"]."""
    s = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
    s = re.sub(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])", " ", s)
    s = re.sub(r"(?<=[A-Za-z])(?=[^\x00-\x7f])|(?<=[^\x00-\x7f])(?=[A-Za-z])", " ", s)
    return [w.lower() for w in re.split(r"[\W_]+", s) if w]


def _word_category(name: str, table: dict[str, str]) -> str | None:
    found = next((table[w] for w in style_words(name) if w in table), None)
    return found or next((c for w, c in _CJK_WORDS.items() if w in name), None)


def _visible(raw: str) -> tuple[str, bool]:
    """Event text without vector drawings (`{\\p1}m 0 0 l ...{\\p0}`), and whether it had any."""
    parts: list[str] = []
    drawing = had_drawing = False
    for piece in re.split(r"(\{[^{}]*\})", raw):
        if piece.startswith("{") and piece.endswith("}"):
            for level in re.findall(r"\\p(\d+)", piece):
                drawing = int(level) > 0
                had_drawing |= drawing
        elif not drawing:
            parts.append(piece)
    return "".join(parts), had_drawing


def classify(
    style: str, name: str, effect: str, raw_text: str, styles: frozenset[str] | None
) -> tuple[str | None, str]:
    """(why the event is not dialogue, or None; its display text). Pure: the policy in the module doc."""
    visible, had_drawing = _visible(raw_text)
    body = display_text(visible)
    tags = " ".join(_OVERRIDE.findall(raw_text))
    if had_drawing and not body:
        return "drawing (vector shape, nothing to say)", body
    if _KARAOKE_EFFECT.match(effect):
        return f"karaoke (effect {effect.strip()!r})", body
    if _SCROLL_EFFECT.match(effect):
        return f"sign (scrolling effect {effect.strip()!r})", body
    if _KARAOKE_TAG.search(tags):
        return "karaoke (\\k tags)", body
    if styles is not None:
        if style.strip().lower() not in styles:
            return f"style {style!r} is not one of --styles", body
    else:
        cat = _word_category(style, _NON_DIALOGUE)
        if cat is not None:
            return f"{cat} (style {style!r}; pass --styles to choose the dialogue styles)", body
    cat = _word_category(name, _NAME_MARKERS)
    if cat is not None:
        return f"{cat} (actor {name.strip()!r})", body
    if not name.strip() and (_SIGN_TAG.search(tags) or (_POS_TAG.search(tags) and _TYPESET_TAG.search(tags))):
        return "sign (typesetting tags)", body
    return None, body


def _flavour(text: str) -> str:
    head = text[:20000]
    if "[V4 Styles]" in head or re.search(r"ScriptType:\s*v4\.00\s*$", head, re.I | re.M):
        return "ssa"
    return "ass"


def read_ass(text: str, path: Path, kind: str, styles: frozenset[str] | None = None) -> FormatRead:
    out = FormatRead()
    fields = _DEFAULT_FORMAT[_flavour(text)]
    section = None
    seen_events = False
    seen_styles: set[str] = set()
    for n, raw_line in enumerate(text.split("\n"), 1):
        s = raw_line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip().lower()
            seen_events |= section == "events"
            continue
        key, sep, payload = raw_line.partition(":")
        k = key.strip().lower()
        if section in ("v4+ styles", "v4 styles", "v4 styles+") and k == "style" and sep:
            seen_styles.add(payload.split(",", 1)[0].strip().lstrip("*").lower())
        if section != "events" or not s or s.startswith(";"):
            continue
        if not sep:
            out.warnings.append(f"{path}:{n}: not an event line, ignored: {quote(s)}")
        elif k == "format":
            fields = _format_fields(payload, path, n)
        elif k == "comment":
            out.skipped.append((n, "comment"))
        elif k in ("picture", "sound", "movie", "command"):
            out.skipped.append((n, f"{k} (not text)"))
        elif k != "dialogue":
            out.warnings.append(f"{path}:{n}: unknown event type {key.strip()!r}, ignored")
        elif not payload.strip():
            out.skipped.append((n, "empty (a Dialogue line with no fields)"))
        else:
            _dialogue(payload, fields, path, n, styles, out)
    if not seen_events:
        raise InputError(path, "not an ASS/SSA file: no [Events] section found", line=1)
    if styles is not None:
        unknown = sorted(st for st in styles if st not in seen_styles)
        if unknown and seen_styles:
            out.warnings.append(f"--styles: no style named {', '.join(unknown)} in {path}")
    return out


def _format_fields(payload: str, path: Path, n: int) -> list[str]:
    names = [f.strip().lower().replace("actor", "name") for f in payload.split(",")]
    missing = [f for f in ("start", "end", "text") if f not in names]
    if missing or names[-1] != "text":
        why = f"has no {', '.join(missing)} field" if missing else "must end with Text"
        raise InputError(path, f"the [Events] Format line {why}", line=n)
    return names


def _dialogue(
    payload: str, fields: list[str], path: Path, n: int, styles: frozenset[str] | None, out: FormatRead
) -> None:
    values = payload.lstrip().split(",", len(fields) - 1)
    if len(values) < len(fields):
        raise InputError(
            path,
            f"event line has {len(values)} fields, expected {len(fields)} ({', '.join(fields)})",
            line=n,
            hint="fix or delete the line (a Comment: line would be skipped)",
        )
    ev = dict(zip(fields, values, strict=True))
    times = []
    for what in ("start", "end"):
        value = ev[what].strip()
        m = _TIME.fullmatch(value)
        try:
            if m is None:
                raise ValueError("expected H:MM:SS.cc")
            times.append(stamp_seconds(m))
        except ValueError as e:
            raise InputError(path, f"bad {what} time {quote(value)}: {e}", line=n) from None
    style = ev.get("style", "").strip().lstrip("*") or "Default"
    name = ev.get("name", "")
    reason, body = classify(style, name, ev.get("effect", ""), ev["text"], styles)
    if reason is not None:
        out.skipped.append((n, reason))
    else:
        out.events.append(RawEvent(n, times[0], times[1], body, name.strip() or None, style))


_EVENTS = re.compile(r"^\s*\[events\]\s*$", re.I | re.M)


def ass_header(script_text: str) -> str | None:
    """Everything of an ASS/SSA script before its [Events] section (Script Info, styles, fonts), as the
    re-timed file's header; None when there is no [Events] section."""
    m = _EVENTS.search(script_text)
    if m is None:
        return None
    return script_text[: m.start()].rstrip("\n") + "\n"
