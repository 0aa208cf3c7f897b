"""IndexTTS-2.5 normalisation: the original TextNormalizer.normalize step for step around a grammar.

The original runs WeTextProcessing (pynini grammars, not available here) between its own Python pre- and
post-processing. This module reproduces that Python part exactly and takes the grammar step as a
parameter: `VERBALIZERS` (our small number reader, the default, as in IndexTTS-2) or `IDENTITY`, which is
what the weight-free oracle ran the original with, so the parity corpus checks every step but the grammar.

The order on the Chinese route (CJK, no Latin letter, an e-mail or tone pinyin in the text): annotations
to placeholders, `X's` -> `X is`, glossary, strip the end, hyphens in technical terms to `<H>`, tone
pinyin to `<pinyin_a>`..., Chinese names to `<n_a>`..., grammar, then everything back (pinyin with the
j/q/x + u -> v correction, uppercased), and the character map with `$` -> `.`. The English route keeps
only contractions, glossary and technical terms, and the character map without `$`.

One deliberate difference: the original collects the distinct pinyin and names through a `set`, whose
order follows Python's string hashing; here they keep their order of first appearance. The result can
differ only when one distinct tone syllable also occurs inside a longer one (`un4 ... xun4`); there the
original itself gives a different answer from run to run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fasttts_cli.indextts2.text import _ANNOTATION as ANNOTATION
from fasttts_cli.indextts2.text import _CHAR_MAP as CHAR_MAP
from fasttts_cli.indextts2.text import _CHAR_RE as CHAR_RE
from fasttts_cli.indextts2.text import (
    _CONTRACTION,
    _PINYIN_TONE,
    _TECH_TERM,
    _ZH_CHAR_MAP,
    _ZH_CHAR_RE,
    _correct_pinyin,
    _protect,
    _restore,
    use_chinese,
)
from fasttts_cli.indextts2.text_numbers import verbalize_chinese, verbalize_english

_NAME = re.compile(r"[\u4e00-\u9fff]+(?:[-·—][\u4e00-\u9fff]+){1,2}", re.IGNORECASE)
_TECH_RESTORE = re.compile(r"\s*<H>\s*")

Glossary = Mapping[str, "str | Mapping[str, str]"]


@dataclass(frozen=True)
class Grammar:
    """The WeTextProcessing step of each route: text -> text with numbers and symbols read out."""

    zh: Callable[[str], str]
    en: Callable[[str], str]


def _same(text: str) -> str:
    return text


VERBALIZERS = Grammar(verbalize_chinese, verbalize_english)
IDENTITY = Grammar(_same, _same)


def char_map(text: str) -> str:
    """The punctuation / quote / bracket map (alternation in key order: `，，，` maps as three `，`)."""
    return CHAR_RE.sub(lambda m: CHAR_MAP[m.group()], text)


def _apply_glossary(text: str, glossary: Glossary, route: str) -> str:
    # longest term first; a term without a reading for this route stands for itself
    for term in sorted(glossary, key=len, reverse=True):
        value = glossary[term]
        reading = value.get(route, term) if isinstance(value, Mapping) else value
        text = re.compile(re.escape(term), re.IGNORECASE).sub(reading, text)
    return text


def _save_tech_terms(text: str) -> tuple[str, bool]:
    terms = sorted(set(_TECH_TERM.findall(text)), key=len, reverse=True)
    for term in terms:
        text = text.replace(term, term.replace("-", "<H>"))
    return text, bool(terms)


def _restore_tech_terms(text: str, saved: bool) -> str:
    return _TECH_RESTORE.sub("-", text) if saved else text


def _save_numbered(text: str, found: list[str], tag: str) -> tuple[str, list[str]]:
    """Each distinct match (first appearance first) -> `<{tag}_a>`, `<{tag}_b>`, ... by str.replace."""
    distinct = list(dict.fromkeys(found))
    for i, item in enumerate(distinct):
        text = text.replace(item, f"<{tag}_{chr(ord('a') + i)}>")
    return text, distinct


def _restore_numbered(text: str, saved: list[str], tag: str, fix: Callable[[str], str] = _same) -> str:
    for i, item in enumerate(saved):
        text = text.replace(f"<{tag}_{chr(ord('a') + i)}>", fix(item))
    return text


def normalize(text: str, grammar: Grammar = VERBALIZERS, glossary: Glossary | None = None) -> str:
    """The original's TextNormalizer.normalize (zh, zhen and en) with `grammar` as its WeText step."""
    text, annotations = _protect(text, ANNOTATION, "PRONPLACEHOLDER")
    if use_chinese(text):
        text = _CONTRACTION.sub(r"\1 is", text)
        if glossary:
            text = _apply_glossary(text, glossary, "zh")
        text, tech = _save_tech_terms(text.rstrip())
        found = ["".join(groups) for groups in _PINYIN_TONE.findall(text)]
        text, pinyin = _save_numbered(text, found, "pinyin")
        text, names = _save_numbered(text, _NAME.findall(text), "n")
        try:
            text = grammar.zh(text)
        except Exception:  # the original reads a failing grammar as empty text
            text = ""
        text = _restore_numbered(text, names, "n")
        text = _restore_numbered(text, pinyin, "pinyin", _correct_pinyin)
        text = _restore_tech_terms(text, tech)
        text = _ZH_CHAR_RE.sub(lambda m: _ZH_CHAR_MAP[m.group()], text)
    else:
        try:  # on any failure the original keeps the text as far as it got
            text = _CONTRACTION.sub(r"\1 is", text)
            if glossary:
                text = _apply_glossary(text, glossary, "en")
            saved, tech = _save_tech_terms(text)
            text = _restore_tech_terms(grammar.en(saved), tech)
        except Exception:
            pass
        text = char_map(text)
    return _restore(text, annotations)
