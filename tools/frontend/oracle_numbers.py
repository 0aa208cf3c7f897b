"""The number corpus through the ORIGINAL front ends (IndexTTS-2 and 2.5), for run_frontend_oracle.py.

Runs inside the oracle's worker (reference environment, real WeTextProcessing + pynini, real
SentencePiece), after it has imported the original's `indextts.utils.front`:

- IndexTTS-2 (infer_v2.py `infer_generator`): `TextTokenizer(bpe, TextNormalizer(enable_glossary=True))`,
  `tokenize(text)` (normalise, `tokenize_by_CJK_char`, SentencePiece pieces), `split_segments(pieces,
  max_text_tokens_per_segment)` and `convert_tokens_to_ids` per segment, the calls infer_v2 makes in
  that order. `normalized` / `pretokenized` are recorded by calling the original's own `normalize` and
  `tokenize_by_CJK_char` on the same text (what `encode` does in between, for texts longer than one
  character).
- IndexTTS-2.5: every line under each of its routes (numbers_corpus.routes) through the same executed
  infer_v2_5 statements as the main 2.5 corpus (the `run_case` the caller hands in).

Multi-segment lines (`MULTI`): long lines of several sentences with numbers, split at the default
budget and at small ones, so segment boundaries after normalisation are covered for both versions.
Standard library only at import time.
"""

from __future__ import annotations

from collections.abc import Callable

MULTI = [
    (
        "en",
        "At 6:00 on July 4, 1976, 3 men took $20,000 from the First National Bank on 5th Ave. "
        "They drove 120 km/h for 2 hours. Police found 25% of the cash on Jan. 5, 1977, at 10:30 pm. "
        "Call 555-123-4567 with any information; the reward is $1,500.",
    ),
    (
        "zh",
        "2010年7月16日，《盗梦空间》在美国上映，时长148分钟。票房达到8.3亿美元，增长了35%。"
        "第2天早上8:30，导演在北京召开发布会，电话是010-62345678。全程42.195公里，气温28℃。",
    ),
]
MULTI_BUDGETS = (120, 40, 20)


def v2_case(tokenizer: object, normalizer: object, cjk: Callable[[str], str], text: str, budget: int) -> dict:
    """What infer_v2 computes for one text: pieces, ids, segments (as piece lists and as ids)."""
    pieces = tokenizer.tokenize(text)  # type: ignore[attr-defined]
    normalized = normalizer.normalize(text)  # type: ignore[attr-defined]
    segments = tokenizer.split_segments(pieces, budget)  # type: ignore[attr-defined]
    return {
        "normalized": normalized,
        "pretokenized": cjk(normalized),
        "pieces": pieces,
        "ids": tokenizer.convert_tokens_to_ids(pieces),  # type: ignore[attr-defined]
        "segment_pieces": segments,
        "segment_ids": [tokenizer.convert_tokens_to_ids(s) for s in segments],  # type: ignore[attr-defined]
    }


def v2_cases(tokenizer: object, normalizer: object, cjk: Callable[[str], str]) -> list[dict]:
    from numbers_corpus import lines

    out = []
    for line in lines():
        case = {k: line[k] for k in ("id", "category", "real", "text")}
        out.append({**case, "max_text_tokens_per_segment": 120,
                    "expected": v2_case(tokenizer, normalizer, cjk, line["text"], 120)})  # fmt: skip
    for i, (lang, text) in enumerate(MULTI):
        for budget in MULTI_BUDGETS:
            out.append({"id": f"multi-{lang}-{i}-seg{budget}", "category": "multi-segment", "real": False,
                        "text": text, "max_text_tokens_per_segment": budget,
                        "expected": v2_case(tokenizer, normalizer, cjk, text, budget)})  # fmt: skip
    return out


def v25_cases(case_of: Callable[..., dict], run_case: Callable[[dict], dict]) -> list[dict]:
    """2.5 cases in the main corpus's format (`case_of` builds one, `run_case` runs the original on it)."""
    from numbers_corpus import lines, routes

    out = []
    for line in lines():
        for lang in routes(line):
            case = case_of(f"{line['id']}-{lang}", lang, line["text"])
            out.append({**case, "category": line["category"], "real": line["real"]})
    for i, (lang, text) in enumerate(MULTI):
        for budget in MULTI_BUDGETS:
            case = case_of(f"multi-{lang}-{i}-seg{budget}", lang, text, max_text_tokens_per_segment=budget)
            out.append({**case, "category": "multi-segment", "real": False})
    return [{**c, "expected": run_case(c)} for c in out]
