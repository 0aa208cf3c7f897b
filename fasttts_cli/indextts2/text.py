"""IndexTTS-2 text front end: normalisation, CJK splitting + uppercasing, SentencePiece, segmenting.

Exact to the original (indextts/utils/front.py at index-tts ee40fa7): `normalize` is the original's
TextNormalizer.normalize with WeTextProcessing as its grammar step (text_normalize.py, text_grammar.py);
then `tokenize_by_CJK_char` (spaces around each CJK character, everything else only stripped and
UPPERCASED, so punctuation after a CJK run stays glued to the next Latin word: `世 界 ,THIS`), SentencePiece
pieces without BOS/EOS, ids by `PieceToId`, and `split_segments` with its quirks (cut after . ! ? once a
piece has more than 2 tokens, flush at commas and at `-`, hard split past the maximum, a `'` after a cut
token both closes the piece and opens the next, greedy merging).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

from fasttts_cli.errors import InputError
from fasttts_cli.indextts2.text_normalize import normalize

MAX_SEGMENT_TOKENS = 120  # infer()'s default max_text_tokens_per_segment

_CJK_SPLIT = re.compile(
    r"([\u1100-\u11ff\u2e80-\ua4cf\ua840-\uD7AF\uF900-\uFAFF\uFE30-\uFE4F\uFF65-\uFFDC\U00020000-\U0002FFFF])"
)
SENTENCE_END_TOKENS = (".", "!", "?", "▁.", "▁?", "▁...")
_COMMA_TOKENS = (",", "▁,")
_QUOTE_TOKENS = ("'", "▁'")


def tokenize_by_cjk_char(text: str) -> str:
    """Spaces around every CJK character, other runs stripped and UPPERCASED (the original pre-tokenizer)."""
    parts = _CJK_SPLIT.split(text.strip())
    return " ".join(p.strip().upper() for p in parts if p.strip())


# ------------------------------------------------------------------------------------------ segmenting


def _cut_at(tokens: list[str], cuts: tuple[str, ...], max_tokens: int, quick: int) -> list[list[str]]:
    """The original's split_segments_by_token, including its quirks (see module docstring)."""
    if not tokens:
        return []
    pieces: list[list[str]] = []
    cur: list[str] = []
    for i, tok in enumerate(tokens):
        cur.append(tok)
        sub: list[list[str]]
        if not any(c in cuts for c in _COMMA_TOKENS) and any(c in cur for c in _COMMA_TOKENS):
            sub = _cut_at(cur, _COMMA_TOKENS, max_tokens, quick)
        elif "-" not in cuts and "-" in cur:
            sub = _cut_at(cur, ("-",), max_tokens, quick)
        elif len(cur) <= max_tokens:
            if tok in cuts and len(cur) > 2:
                if i + 1 < len(tokens) and tokens[i + 1] in _QUOTE_TOKENS:
                    cur.append(tokens[i + 1])  # ...and the loop still visits it: it opens the next piece too
                pieces.append(cur)
                cur = []
            continue
        else:
            warnings.warn(
                f"a sentence of {len(cur)} tokens exceeds {max_tokens}; cut by length",
                RuntimeWarning,
                stacklevel=2,
            )
            sub = [cur[j : j + max_tokens] for j in range(0, len(cur), max_tokens)]
        pieces.extend(sub)
        cur = []
    if cur:
        pieces.append(cur)
    merged: list[list[str]] = []
    total = 0
    for piece in pieces:
        total += len(piece)
        if not piece:
            continue
        if merged and (
            (len(merged[-1]) + len(piece) <= max_tokens and total > quick)
            or len(merged[-1]) + len(piece) <= max_tokens / 2
        ):
            merged[-1] = merged[-1] + piece
        else:
            merged.append(piece)
    return merged


def split_segments(
    pieces: list[str], max_tokens: int = MAX_SEGMENT_TOKENS, quick_streaming_tokens: int = 0
) -> list[list[str]]:
    """The original's TextTokenizer.split_segments on SentencePiece pieces."""
    return _cut_at(list(pieces), SENTENCE_END_TOKENS, max_tokens, quick_streaming_tokens)


# ------------------------------------------------------------------------------------------- front end


class TextFrontEnd:
    """Text -> GPT text ids, as IndexTTS-2 does it. `load(bpe_model_path)` first.

    `max_text_tokens` (config.yaml gpt.max_text_tokens) caps the segment length together with the
    original's 120: a segment never exceeds what the GPT's text position table holds.
    """

    def __init__(
        self, max_text_tokens: int | None = None, normalizer: Callable[[str], str] | None = normalize
    ):
        self.sp = None
        # an explicit segment limit may exceed 120 but never the GPT's text position table
        self.max_text_tokens = max_text_tokens or 10**9
        self.max_segment_tokens = min(MAX_SEGMENT_TOKENS, self.max_text_tokens)
        self.normalizer = normalizer

    @classmethod
    def load(cls, bpe_model_path: Path | str, max_text_tokens: int | None = None) -> TextFrontEnd:
        import sentencepiece as spm

        path = Path(bpe_model_path)
        if not path.is_file():
            raise InputError(path, "SentencePiece model not found")
        fe = cls(max_text_tokens)
        try:
            fe.sp = spm.SentencePieceProcessor(model_file=str(path))
        except Exception as e:  # sentencepiece raises RuntimeError/OSError with C++ messages
            raise InputError(path, f"not a SentencePiece model: {e}") from None
        return fe

    def _processor(self):
        if self.sp is None:
            raise RuntimeError("TextFrontEnd.load(bpe_model_path) first")
        return self.sp

    @property
    def vocab_size(self) -> int:
        return self._processor().GetPieceSize()

    @property
    def unk_id(self) -> int:
        return self._processor().unk_id()

    def normalize(self, text: str) -> str:
        return self.normalizer(text) if self.normalizer else text

    def pretokenize(self, normalized: str) -> str:
        return tokenize_by_cjk_char(normalized)

    def pieces_of_normalized(self, normalized: str) -> list[str]:
        """Stage 2 from normalised text: CJK split + uppercase, then SentencePiece pieces."""
        return list(self._processor().Encode(self.pretokenize(normalized), out_type=str))

    def tokenize(self, text: str) -> list[str]:
        """TextTokenizer.tokenize: a lone character is encoded raw (no normalisation nor uppercasing)."""
        if not text:
            return []
        if len(text.strip()) == 1:
            return list(self._processor().Encode(text, out_type=str))
        return self.pieces_of_normalized(self.normalize(text))

    def ids(self, pieces: list[str]) -> list[int]:
        sp = self._processor()
        out = [sp.PieceToId(p) for p in pieces]
        unk = sp.unk_id()
        if any(i == unk for i in out):
            bad = [p for p, i in zip(pieces, out, strict=True) if i == unk]
            warnings.warn(f"text pieces unknown to the tokenizer: {bad}", RuntimeWarning, stacklevel=2)
        return out

    def encode(self, text: str) -> list[int]:
        return self.ids(self.tokenize(text))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def segment_pieces(
        self, text: str, max_tokens: int | None = None, quick_streaming_tokens: int = 0
    ) -> list[list[str]]:
        limit = self.max_segment_tokens if max_tokens is None else min(max_tokens, self.max_text_tokens)
        return split_segments(self.tokenize(text), limit, quick_streaming_tokens)

    def segments(
        self, text: str, max_tokens: int | None = None, quick_streaming_tokens: int = 0
    ) -> list[list[int]]:
        """GPT text ids per segment (each becomes `[0] + ids + [1]` inside the GPT prefix)."""
        return [self.ids(p) for p in self.segment_pieces(text, max_tokens, quick_streaming_tokens)]
