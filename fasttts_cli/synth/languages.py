"""Which language a line is spoken in: `--lang` against the languages the engine's model speaks.

An engine lists what it speaks as ISO 639-1 codes (`languages`; IndexTTS-2: zh, en; the draft voice: en) and
says whether it must be told (`needs_language`: IndexTTS-2.5 has no language detection). `--lang und` (the
default) leaves the language to the engine where it can tell by itself. An engine that lists nothing (an
embedding program's own) is taken to speak whatever it is given.
"""

from __future__ import annotations

from typing import Any

from fasttts_cli.errors import UsageError
from fasttts_cli.media.mux import iso639_1, normalize_lang

UNDETERMINED = "und"


def spoken_language(synth: Any, lang: str, *, flag: str = "--lang") -> str | None:
    """The ISO 639-1 code the lines are spoken in, or None (the engine decides: `und`); UsageError (exit 2)
    naming `lang` and what the model speaks when it cannot speak it."""
    t = normalize_lang(lang, flag=flag)
    speaks = tuple(getattr(synth, "languages", ()) or ())
    what = f"the {synth.name} engine" + (" (the draft voice)" if synth.name == "draft" else "")
    if t == UNDETERMINED:
        if getattr(synth, "needs_language", False):
            raise UsageError(
                f"{flag} {lang}: {what} needs to be told the language of the text; it speaks "
                f"{', '.join(speaks)}",
                hint=f"pass {flag} with the script's language, e.g. {flag} {speaks[0] if speaks else 'en'}",
            )
        return None
    one = iso639_1(t)
    if speaks and one not in speaks:
        raise UsageError(
            f"{flag} {lang}: {what} cannot speak it; its model speaks {', '.join(speaks)}",
            hint="use an engine whose model speaks the script's language"
            + ("" if "ja" in speaks else " (an IndexTTS-2.5 engine also speaks ja, es, ar)"),
        )
    return one
