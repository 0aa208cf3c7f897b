"""IndexTTS-2.5 text front end: text + language -> the GPT's text ids per segment, exact to the original.

The chain (infer_v2_5.py, infer_generator, in this order), each step a method so that parity can check it:

1. `char_map`: the punctuation map on the raw text, for every language.
2. `normalize`: zh, zhen and en through TextNormalizer.normalize with WeTextProcessing
   (indextts2/text_normalize.py, text_grammar.py); ja and es through
   NeMo in the original, which is not installed there, so they pass unchanged; any other language too.
3. `apply_case`: lower case for zh, zhen, en and ja, UPPER case for es, nothing for the rest.
4. `apply_annotations`: `<word|pron>` -> ` KANA ` for an all-hiragana or all-katakana reading, else the
   reading between `<|SPECIAL_TOKEN_2|>` (word with a CJK ideograph: pinyin) or `<|SPECIAL_TOKEN_1|>`.
5. `space_japanese` (ja only): MeCab word spacing (text_japanese.py).
6. `upper_specials`: the inside of every `<|...|>` in upper case.
7. `split`: token-budget segments; annotation spans are never cut.
8. `segment_ids`: tiktoken ids of `"<|lang|> " + segment`, then a literal 1.
9. `gpt_ids`: what the GPT embeds: start + the ids without any start/stop id + stop. With the usual 0/1
   these are `!` and `"`, so a stand-alone `!` token disappears (the character map already turned `"`
   into `'`), as in the original.

`lang` is lower-cased; it picks the prefix, the branch above, and the language-embedding row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.errors import UsageError
from fasttts_cli.indextts2 import text_normalize
from fasttts_cli.indextts2.text_grammar import WETEXT, Grammar
from fasttts_cli.indextts25.text_japanese import space_words
from fasttts_cli.indextts25.text_tokenizer import LANGUAGE_ROW, Tokenizer25, language_row

MAX_SEGMENT_TOKENS = 120  # infer()'s default max_text_tokens_per_segment
TRAINED_LANGUAGES = ("zh", "en", "ja", "es", "ar")  # what the 2.5 release documents and its WebUI offers
NORMALIZED_LANGUAGES = frozenset({"zh", "zhen", "en"})
LOWER_CASE_LANGUAGES = frozenset({"zh", "zhen", "en", "ja"})

_ANNOTATION = re.compile(r"<([^|>\n]+)\|([^>\n]+)>")
_HIRAGANA = re.compile(r"[\u3040-\u309F]+")
_KATAKANA = re.compile(r"[\u30A0-\u30FF]+")
_HAN = re.compile(r"[\u4e00-\u9fff]")
_SPECIAL = re.compile(r"<\|([^|]+)\|>")
_ATOMIC = re.compile(r"<\|SPECIAL_TOKEN_\d+\|>.*?<\|SPECIAL_TOKEN_\d+\|>")
_SPLIT_AFTER = re.compile(r"(?<=[，。！？、；：,\.!\?;:\n])")


def _annotation(m: re.Match[str]) -> str:
    word, pron = m.group(1), m.group(2).upper()
    if _HIRAGANA.fullmatch(pron) or _KATAKANA.fullmatch(pron):
        return f" {pron} "
    token = "SPECIAL_TOKEN_2" if _HAN.search(word) else "SPECIAL_TOKEN_1"
    return f"<|{token}|>{pron}<|{token}|>"


@dataclass(frozen=True)
class TextConfig25:
    """The config.yaml `gpt` keys the front end depends on (the original's class defaults otherwise)."""

    max_text_tokens: int = 120
    start_text_token: int = 0
    stop_text_token: int = 1

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TextConfig25:
        """From the whole config (with a `gpt` section) or from the `gpt` section itself."""
        gpt = config.get("gpt", config)
        d = cls()
        return cls(
            int(gpt.get("max_text_tokens", d.max_text_tokens)),
            int(gpt.get("start_text_token", d.start_text_token)),
            int(gpt.get("stop_text_token", d.stop_text_token)),
        )


@dataclass(frozen=True)
class TextSteps25:
    """Every intermediate of one text, in chain order."""

    lang: str
    prefix: str
    char_mapped: str
    normalized: str
    cased: str
    annotated: str
    spaced: str
    special_upper: str
    segments: list[str]
    segment_ids: list[list[int]]
    gpt_ids: list[list[int]]
    lang_index: int


@dataclass
class TextFrontEnd25:
    """`TextFrontEnd25.load(tiktoken_file, config)`; `process(text, lang)` runs the whole chain."""

    tokenizer: Tokenizer25
    config: TextConfig25 = field(default_factory=TextConfig25)
    grammar: Grammar = WETEXT
    glossary: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        tiktoken_file: Path | str,
        config: Mapping[str, Any] | TextConfig25 | None = None,
        grammar: Grammar = WETEXT,
        glossary: Mapping[str, Any] | None = None,
    ) -> TextFrontEnd25:
        if config is None:
            config = TextConfig25()
        elif not isinstance(config, TextConfig25):
            config = TextConfig25.from_config(config)
        return cls(Tokenizer25.load(tiktoken_file), config, grammar, dict(glossary or {}))

    # ------------------------------------------------------------------------------ language

    @staticmethod
    def check_language(lang: str) -> str:
        code = lang.lower()
        if code not in LANGUAGE_ROW and code != "zhen":
            raise UsageError(
                f"unknown language {lang!r} for IndexTTS-2.5",
                hint=f"trained on {', '.join(TRAINED_LANGUAGES)}; any Whisper language code is accepted",
            )
        return code

    @staticmethod
    def prefix(lang: str) -> str:
        return f"<|{lang.lower()}|> "

    def lang_index(self, lang: str) -> int:
        return language_row(self.check_language(lang))

    # ------------------------------------------------------------------------------ string steps

    @staticmethod
    def char_map(text: str) -> str:
        return text_normalize.char_map(text)

    def normalize(self, text: str, lang: str) -> str:
        if lang.lower() in NORMALIZED_LANGUAGES:
            return text_normalize.normalize(text, self.grammar, self.glossary)
        return text

    @staticmethod
    def apply_case(text: str, lang: str) -> str:
        code = lang.lower()
        if code in LOWER_CASE_LANGUAGES:
            return text.lower()
        return text.upper() if code == "es" else text

    @staticmethod
    def apply_annotations(text: str) -> str:
        return _ANNOTATION.sub(_annotation, text)

    @staticmethod
    def space_japanese(text: str, lang: str) -> str:
        return space_words(text) if lang.lower() == "ja" else text

    @staticmethod
    def upper_specials(text: str) -> str:
        return _SPECIAL.sub(lambda m: f"<|{m.group(1).upper()}|>", text)

    def string_steps(self, text: str, lang: str, text_normalization: bool = True) -> list[str]:
        """Steps 1-6 in order: char-mapped, normalised, cased, annotated, spaced, specials upper-cased."""
        code = self.check_language(lang)
        steps = [self.char_map(text)]
        steps.append(self.normalize(steps[-1], code) if text_normalization else steps[-1])
        steps.append(self.apply_case(steps[-1], code))
        steps.append(self.apply_annotations(steps[-1]))
        steps.append(self.space_japanese(steps[-1], code))
        steps.append(self.upper_specials(steps[-1]))
        return steps

    # ------------------------------------------------------------------------------ tokens

    def count_tokens(self, text: str, lang: str, text_normalization: bool = True) -> int:
        """Tokens of the prepared text without prefix: what the segmentation budget is measured in."""
        return len(self.tokenizer.encode(self.string_steps(text, lang, text_normalization)[-1]))

    def budget(self, lang: str, max_tokens: int = MAX_SEGMENT_TOKENS) -> int:
        """Tokens one segment may hold: the cap less the prefix, never below 1."""
        limit = min(max_tokens, self.config.max_text_tokens)
        return max(1, limit - len(self.tokenizer.encode(self.prefix(lang))))

    def split(self, text: str, lang: str, max_tokens: int = MAX_SEGMENT_TOKENS) -> list[str]:
        """The original's split_text_by_tokens on a prepared text."""
        budget = self.budget(lang, max_tokens)

        def fits(s: str) -> bool:
            return len(self.tokenizer.encode(s)) <= budget

        if fits(text):
            return [text]
        chunks: list[str] = []
        for piece, atomic in _atomic_pieces(text):
            if atomic:
                chunks.append(piece)
                continue
            for part in _SPLIT_AFTER.split(piece):
                if not part:
                    continue
                if fits(part):
                    chunks.append(part)
                    continue
                chunks += _pack(part, fits)  # a part over the budget: cut it character by character
        # then merge while the re-encoded join fits (BPE merges across the seam, so lengths do not add)
        return _pack(chunks, fits) or [text]

    def segment_ids(self, segments: list[str], lang: str) -> list[list[int]]:
        prefix = self.prefix(lang)
        return [[*self.tokenizer.encode(prefix + seg), 1] for seg in segments]

    def gpt_ids(self, ids: list[int]) -> list[int]:
        start, stop = self.config.start_text_token, self.config.stop_text_token
        return [start, *(i for i in ids if i not in (start, stop)), stop]

    def process(
        self, text: str, lang: str, max_tokens: int = MAX_SEGMENT_TOKENS, text_normalization: bool = True
    ) -> TextSteps25:
        code = self.check_language(lang)
        strings = self.string_steps(text, code, text_normalization)
        segments = self.split(strings[-1], code, max_tokens)
        ids = self.segment_ids(segments, code)
        gpt = [self.gpt_ids(s) for s in ids]
        return TextSteps25(code, self.prefix(code), *strings, segments, ids, gpt, language_row(code))

    def segments(
        self, text: str, lang: str, max_tokens: int = MAX_SEGMENT_TOKENS, text_normalization: bool = True
    ) -> list[list[int]]:
        """GPT text ids per segment, start and stop included."""
        return self.process(text, lang, max_tokens, text_normalization).gpt_ids


def _pack(items: Iterable[str], fits: Callable[[str], bool]) -> list[str]:
    """Greedy packing, left to right: an item joins the current string while the join still fits."""
    out: list[str] = []
    current = ""
    for item in items:
        if current and not fits(current + item):
            out.append(current)
            current = item
        else:
            current += item
    if current:
        out.append(current)
    return out


def _atomic_pieces(text: str) -> list[tuple[str, bool]]:
    """Free text and annotation spans, alternating, in order (the spans flagged True)."""
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for m in _ATOMIC.finditer(text):
        if m.start() > pos:
            pieces.append((text[pos : m.start()], False))
        pieces.append((m.group(0), True))
        pos = m.end()
    if pos < len(text):
        pieces.append((text[pos:], False))
    return pieces
