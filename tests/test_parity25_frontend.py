"""IndexTTS-2.5 front end against the original, string for string and id for id.

The cases and the original's outputs are in $FASTTTS_PARITY25_DIR/frontend.json (the chain's rules) and
numbers25.json (subtitle lines full of numbers, dates, money, units...; default folder the committed
tests/data/parity25), made by tools/parity25/run_frontend_oracle.py from the original code with the real
WeTextProcessing; our front end runs with its default grammar (the same WeTextProcessing), so every step
is compared, the grammar included. Config values (position table, start/stop ids) and budgets come from
the file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from fasttts_cli.indextts25.text import TextConfig25, TextFrontEnd25
from fasttts_cli.indextts25.text_tokenizer import Tokenizer25, special_token_names

pytestmark = pytest.mark.parity25

REPO = Path(__file__).resolve().parent.parent
STRING_STEPS = ("char_mapped", "normalized", "cased", "annotated", "spaced", "special_upper")
FILES = ("frontend.json", "numbers25.json")
HAS_FUGASHI = importlib.util.find_spec("fugashi") is not None


def vector_dir() -> Path:
    return Path(os.environ.get("FASTTTS_PARITY25_DIR", REPO / "tests" / "data" / "parity25")).resolve()


@cache
def oracle(name: str = FILES[0]) -> dict[str, Any] | None:
    path = vector_dir() / name
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


@cache
def tokenizer() -> Tokenizer25:
    doc = oracle()
    assert doc is not None
    return Tokenizer25.load(vector_dir() / doc["tokenizer"]["file"])


def _case_ids() -> list[str]:
    ids = [f"{name}:{c['id']}" for name in FILES for c in (oracle(name) or {}).get("cases", [])]
    return ids or ["<missing>"]


def _case(case_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    name, _, cid = case_id.partition(":")
    doc = oracle(name) if cid else None
    if doc is None:
        pytest.skip(f"no {' or '.join(FILES)} in {vector_dir()} (set FASTTTS_PARITY25_DIR)")
    return doc, next(c for c in doc["cases"] if c["id"] == cid)


def test_tokenizer_file_is_the_one_the_oracle_used() -> None:
    doc = oracle()
    if doc is None:
        pytest.skip(f"no frontend.json in {vector_dir()}")
    data = (vector_dir() / doc["tokenizer"]["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == doc["tokenizer"]["sha256"]
    tok = tokenizer()
    assert tok.n_ranks == doc["tokenizer"]["ranks"]
    assert tok.n_vocab == doc["tokenizer"]["ranks"] + len(special_token_names())


@pytest.mark.parametrize("case_id", _case_ids())
def test_front_end_equals_original(case_id: str) -> None:
    doc, case = _case(case_id)
    if case["lang"].lower() == "ja" and not HAS_FUGASHI:
        pytest.skip("Japanese needs fugashi + unidic-lite (the `ja` extra), not installed")
    assert doc["tokenizer"] == oracle()["tokenizer"], "both files use the one tokenizer"  # type: ignore[index]
    config = TextConfig25(case["max_text_tokens"], **doc["config"])
    fe = TextFrontEnd25(tokenizer(), config, glossary=case.get("glossary") or {})
    got = fe.process(
        case["text"], case["lang"], case["max_text_tokens_per_segment"], case["text_normalization"]
    )
    want = case["expected"]
    where = f"{case_id} ({case['lang']}, {case['text']!r}); oracle packages {doc['made_by']['packages']}"
    assert got.prefix == want["prefix"], where
    for step in STRING_STEPS:
        assert getattr(got, step) == want[step], f"{step}: {where}"
    assert got.segments == want["segments"], where
    assert got.segment_ids == want["segment_ids"], where
    assert got.gpt_ids == want["gpt_ids"], where
    assert got.lang_index == want["lang_index"], where
