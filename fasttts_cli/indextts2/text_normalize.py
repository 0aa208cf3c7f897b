"""The original's TextNormalizer.normalize (indextts/utils/front.py), step for step, around its grammar.

One implementation for IndexTTS-2 and the zh, zhen and en routes of 2.5 (the original shares the class).
The grammar step is WeTextProcessing with the original's options (`text_grammar.WETEXT`, the default);
`text_grammar.IDENTITY` skips it, for tests of the steps around it.

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

from fasttts_cli.errors import MissingDependencyError
from fasttts_cli.indextts2.text_grammar import WETEXT, Grammar

# --------------------------------------------------------------------------------- original's constants

_HAS_HAN = re.compile(r"[\u4e00-\u9fff]")
_HAS_LATIN = re.compile(r"[a-zA-Z]")
_EMAIL = re.compile(r"^[a-zA-Z0-9]+@[a-zA-Z0-9]+\.[a-zA-Z]+$")
PINYIN_TONE = re.compile(
    r"(?<![a-z])((?:[bpmfdtnlgkhjqxzcsryw]|[zcs]h)?(?:[aeiouüv]|[ae]i|u[aio]|ao|ou|i[aue]|[uüv]e|[uvü]ang?"
    r"|uai|[aeiuv]n|[aeio]ng|ia[no]|i[ao]ng)|ng|er)([1-5])",
    re.IGNORECASE,
)
_CONTRACTION = re.compile(r"(what|where|who|which|how|t?here|it|s?he|that|this)'s", re.IGNORECASE)
_TECH_TERM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+")
ANNOTATION = re.compile(r"<([^|>\n]+)\|([^>\n]+)>")
_NAME = re.compile(r"[\u4e00-\u9fff]+(?:[-·—][\u4e00-\u9fff]+){1,2}", re.IGNORECASE)
_TECH_RESTORE = re.compile(r"\s*<H>\s*")

# The original's post-map; order matters (alternation tries the keys in this order at each position).
CHAR_MAP: dict[str, str] = {
    "：": ",", "；": ",", ";": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": " ", "·": "-",
    "、": ",", "...": "…", ",,,": "…", "，，，": "…", "……": "…", "“": "'", "”": "'", '"': "'", "‘": "'",
    "’": "'", "（": "'", "）": "'", "(": "'", ")": "'", "《": "'", "》": "'", "【": "'", "】": "'",
    "[": "'", "]": "'", "—": "-", "～": "-", "~": "-", "「": "'", "」": "'", ":": ",",
}  # fmt: skip
_ZH_CHAR_MAP: dict[str, str] = {"$": ".", **CHAR_MAP}


def _alternation(keys: dict[str, str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(k) for k in keys))


_CHAR_RE, _ZH_CHAR_RE = _alternation(CHAR_MAP), _alternation(_ZH_CHAR_MAP)

Glossary = Mapping[str, "str | Mapping[str, str]"]


def use_chinese(text: str) -> bool:
    """The original's route choice: CJK ideographs, or no Latin letter, or an e-mail, or tone pinyin."""
    if _HAS_HAN.search(text) or not _HAS_LATIN.search(text) or _EMAIL.match(text):
        return True
    return bool(PINYIN_TONE.search(text))


def _protect(text: str, pattern: re.Pattern[str], tag: str) -> tuple[str, dict[str, str]]:
    """Replace matches by letter-only placeholders the grammar cannot touch (`{tag}a{tag}`, ...)."""
    saved: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        n, key = len(saved), ""
        while True:
            key = chr(ord("a") + n % 26) + key
            n = n // 26 - 1
            if n < 0:
                break
        key = f"{tag}{key}{tag}"
        saved[key] = m.group(0)
        return key

    return pattern.sub(sub, text), saved


def _restore(text: str, saved: dict[str, str]) -> str:
    for key, value in saved.items():
        text = text.replace(key, value)
    return text


def _correct_pinyin(p: str) -> str:
    """j/q/x + u/ü -> v, uppercased (the original's restore step)."""
    if p[0] not in "jqxJQX":
        return p
    return re.sub(r"([jqx])[uü](n|e|an)*(\d)", r"\g<1>v\g<2>\g<3>", p, flags=re.IGNORECASE).upper()


def _same(text: str) -> str:
    return text


def char_map(text: str) -> str:
    """The punctuation / quote / bracket map (alternation in key order: `，，，` maps as three `，`)."""
    return _CHAR_RE.sub(lambda m: CHAR_MAP[m.group()], text)


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


def normalize(text: str, grammar: Grammar = WETEXT, glossary: Glossary | None = None) -> str:
    """The original's TextNormalizer.normalize (zh, zhen and en) with `grammar` as its WeText step."""
    text, annotations = _protect(text, ANNOTATION, "PRONPLACEHOLDER")
    if use_chinese(text):
        text = _CONTRACTION.sub(r"\1 is", text)
        if glossary:
            text = _apply_glossary(text, glossary, "zh")
        text, tech = _save_tech_terms(text.rstrip())
        found = ["".join(groups) for groups in PINYIN_TONE.findall(text)]
        text, pinyin = _save_numbered(text, found, "pinyin")
        text, names = _save_numbered(text, _NAME.findall(text), "n")
        try:
            text = grammar.zh(text)
        except MissingDependencyError:  # the original fails at load(), before any line
            raise
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
        except MissingDependencyError:
            raise
        except Exception:
            pass
        text = char_map(text)
    return _restore(text, annotations)
