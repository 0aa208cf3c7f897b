"""IndexTTS-2 front end against the original on subtitle lines full of numbers, dates, money and units.

tests/data/frontend/numbers2.json (or $FASTTTS_FRONTEND_DIR/numbers2.json) holds, per line, what the
original's TextTokenizer (indextts/utils/front.py with the real WeTextProcessing) gives on the v2 parity
`bpe.model`: the normalised string, the CJK-split string, the pieces and ids, and the segments infer_v2
cuts at the line's budget (multi-segment lines at 120, 40 and 20). Made by
tools/parity25/run_frontend_oracle.py from tools/frontend/numbers_corpus.py. The 2.5 routes (zh, en, zhen)
of the same corpus are in test_parity25_frontend.py (numbers25.json).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from fasttts_cli.indextts2.text import TextFrontEnd, tokenize_by_cjk_char

REPO = Path(__file__).resolve().parent.parent


def vector_dir() -> Path:
    return Path(os.environ.get("FASTTTS_FRONTEND_DIR", REPO / "tests" / "data" / "frontend")).resolve()


@cache
def oracle() -> dict[str, Any] | None:
    path = vector_dir() / "numbers2.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


@cache
def front_end() -> TextFrontEnd:
    doc = oracle()
    assert doc is not None
    path = vector_dir() / doc["tokenizer"]["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == doc["tokenizer"]["sha256"], path
    return TextFrontEnd.load(path)


def _case_ids() -> list[str]:
    doc = oracle()
    return [c["id"] for c in doc["cases"]] if doc else ["<missing>"]


# the small parity bpe.model knows 16 CJK characters: most pieces of a Chinese line are <unk>, on both sides
@pytest.mark.filterwarnings("ignore:text pieces unknown to the tokenizer")
@pytest.mark.filterwarnings("ignore:a sentence of .* tokens exceeds")  # the original warns the same
@pytest.mark.parametrize("case_id", _case_ids())
def test_v2_front_end_equals_original(case_id: str) -> None:
    doc = oracle()
    if doc is None:
        pytest.skip(f"no numbers2.json in {vector_dir()} (set FASTTTS_FRONTEND_DIR)")
    case = next(c for c in doc["cases"] if c["id"] == case_id)
    want, fe = case["expected"], front_end()
    where = f"{case_id} ({case['category']}, {case['text']!r})"
    normalized = fe.normalize(case["text"])
    assert normalized == want["normalized"], where
    assert tokenize_by_cjk_char(normalized) == want["pretokenized"], where
    pieces = fe.tokenize(case["text"])
    assert pieces == want["pieces"], where
    assert fe.ids(pieces) == want["ids"], where
    budget = case["max_text_tokens_per_segment"]
    assert fe.segment_pieces(case["text"], budget) == want["segment_pieces"], where
    assert fe.segments(case["text"], budget) == want["segment_ids"], where


def test_corpus_size_and_categories() -> None:
    doc = oracle()
    if doc is None:
        pytest.skip(f"no numbers2.json in {vector_dir()}")
    lines = [c for c in doc["cases"] if c["category"] != "multi-segment"]
    assert len(lines) >= 300
    wanted = {"cardinal", "decimal", "time", "date", "money", "percent", "unit", "ordinal", "abbreviation"}
    assert wanted | {"phone"} <= {c["category"] for c in lines}
    assert any(len(c["expected"]["segment_ids"]) > 1 for c in doc["cases"]), "no multi-segment line"
