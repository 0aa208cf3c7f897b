"""Japanese word spacing for IndexTTS-2.5: MeCab (fugashi) morphemes joined by single spaces.

The original's JapaneseG2PProcessor with `g2p_ratio=0` never replaces a word by its reading, so what is
left is the spacing: the text is cut at runs of spaces (kept as they are), and every piece that is not
blank becomes its morpheme surfaces joined by one space. The result depends on the MeCab dictionary, so
this uses what the original's lock has, `fugashi.Tagger()` over UniDic-lite (the `ja` extra).

Not reproduced: for each piece with kanji the original draws one `random.random()` from Python's global
generator that changes nothing in the text (it only moves later draws of other code in the same process).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from fasttts_cli.errors import MissingDependencyError

_SPACES = re.compile(r"( +)")
_HINT = "install the `ja` extra: pip install 'fasttts-cli[ja]' (fugashi + unidic-lite)"


@cache
def _tagger() -> Callable[[str], list[object]]:
    try:
        import fugashi
    except ImportError:
        raise MissingDependencyError(
            "Japanese text (lang ja) needs fugashi for its word spacing, which is not installed", hint=_HINT
        ) from None
    try:
        return fugashi.Tagger()  # type: ignore[no-any-return]
    except RuntimeError as e:  # fugashi is there but finds no dictionary
        raise MissingDependencyError(f"fugashi found no MeCab dictionary ({e})", hint=_HINT) from None


def space_words(text: str) -> str:
    """The original's process_ja_text at g2p_ratio 0."""
    tagger = _tagger()
    return "".join(
        " ".join(node.surface for node in tagger(part)) if part.strip() else part  # type: ignore[attr-defined]
        for part in _SPACES.split(text)
    )
