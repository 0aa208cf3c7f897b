"""IndexTTS-2.5 front end: the special-token table, languages, error paths, the default grammar (WeText).

Parity with the original, case by case, is in test_parity25_frontend.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fasttts_cli.errors import InputError, MissingDependencyError, UsageError
from fasttts_cli.indextts2.text_grammar import IDENTITY
from fasttts_cli.indextts25 import text_japanese
from fasttts_cli.indextts25.text import TextConfig25, TextFrontEnd25
from fasttts_cli.indextts25.text_tokenizer import LANGUAGE_CODES, language_row, special_token_names

TIKTOKEN = Path(__file__).parent / "data" / "parity25" / "multilingual_zh_ja_yue_char_del.tiktoken"


@pytest.fixture(scope="module")
def fe() -> TextFrontEnd25:
    return TextFrontEnd25.load(TIKTOKEN, {"gpt": {"max_text_tokens": 600}})


def test_special_token_table() -> None:
    names = special_token_names()
    assert len(names) == 1673 and len(set(names)) == 1673
    assert len(LANGUAGE_CODES) == 106
    offsets = {"<|en|>": 2, "<|zh|>": 3, "<|es|>": 5, "<|ja|>": 9, "<|ar|>": 15, "<|su|>": 100}
    offsets |= {"<|SPECIAL_TOKEN_1|>": 122, "<|SPECIAL_TOKEN_2|>": 123, "<|0.00|>": 172, "<|30.00|>": 1672}
    for name, offset in offsets.items():
        assert names.index(name) == offset, name
    assert "<|yue|>" not in names  # only the first 99 codes are specials


def test_special_ids_follow_the_ranks(fe: TextFrontEnd25) -> None:
    r = fe.tokenizer.n_ranks
    assert fe.tokenizer.n_vocab == r + 1673
    assert fe.tokenizer.special_id("<|zh|>") == r + 3
    assert fe.tokenizer.encode("<|SPECIAL_TOKEN_2|>") == [r + 123]  # typed specials are parsed
    assert fe.tokenizer.encode("!") == [0] and fe.tokenizer.encode('"') == [1]


def test_language_rows() -> None:
    rows = {"en": 0, "zh": 1, "es": 3, "ja": 7, "ar": 13, "ZH": 1, "zhen": 105, "xx": 105, "common": 105}
    assert {code: language_row(code) for code in rows} == rows


def test_unknown_language_is_a_usage_error(fe: TextFrontEnd25) -> None:
    with pytest.raises(UsageError, match="unknown language 'klingon'") as err:
        fe.process("hello", "klingon")
    assert "zh, en, ja, es, ar" in str(err.value)
    with pytest.raises(UsageError):
        fe.count_tokens("hello", "xx")
    assert fe.process("hallo", "DE").lang_index == 2  # any Whisper code, any case


def test_missing_fugashi_names_the_ja_extra(fe: TextFrontEnd25, monkeypatch: pytest.MonkeyPatch) -> None:
    text_japanese._tagger.cache_clear()
    monkeypatch.setitem(sys.modules, "fugashi", None)  # import fails as if not installed
    try:
        with pytest.raises(MissingDependencyError, match="fugashi") as err:
            fe.process("こんにちは", "ja")
        assert "fasttts-cli[ja]" in str(err.value)
        assert fe.process("hello", "en").segments == ["hello"]  # other languages never need it
    finally:
        text_japanese._tagger.cache_clear()


def test_bad_rank_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        TextFrontEnd25.load(tmp_path / "none.tiktoken")
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("IQ== 0\nIg==\n")
    with pytest.raises(InputError, match=r"bad.tiktoken:2: not a tiktoken rank file"):
        TextFrontEnd25.load(bad)
    gap = tmp_path / "gap.tiktoken"
    gap.write_text("IQ== 0\nIg== 2\n")
    with pytest.raises(InputError, match=r"not exactly 0\.\.N-1"):
        TextFrontEnd25.load(gap)


def test_lone_bang_is_dropped_only_when_it_is_its_own_token(fe: TextFrontEnd25) -> None:
    (one,) = fe.segments("Hi!", "en")
    (two,) = fe.segments("Hi!!", "en")
    assert one[0] == 0 and one[-1] == 1 and 0 not in one[1:-1]
    assert fe.tokenizer.encode("Hi!")[-1] == 0  # the `!` was there before the strip
    assert fe.tokenizer.encode("!!")[0] in two[1:-1]


def test_stop_id_other_than_one_keeps_the_bang_and_the_literal_one(fe: TextFrontEnd25) -> None:
    other = TextFrontEnd25(fe.tokenizer, TextConfig25(600, start_text_token=60600, stop_text_token=60601))
    (ids,) = other.segments("Hi!", "en")
    assert ids[0] == 60600 and ids[-1] == 60601 and ids[-2] == 1 and ids[-3] == 0


def test_default_grammar_reads_numbers(fe: TextFrontEnd25) -> None:
    # the default grammar is WeTextProcessing; the identity grammar leaves digits alone
    assert fe.process("我有3个苹果", "zh").normalized == "我有三个苹果"
    assert fe.process("I have 3 apples", "en").cased == "i have three apples"
    plain = TextFrontEnd25(fe.tokenizer, fe.config, IDENTITY)
    assert plain.process("我有3个苹果", "zh").normalized == "我有3个苹果"
    assert fe.process("Tengo 3", "es").cased == "TENGO 3"  # no normaliser for es (NeMo is absent)


def test_budget_comes_from_the_position_table(fe: TextFrontEnd25) -> None:
    small = TextFrontEnd25(fe.tokenizer, TextConfig25(max_text_tokens=10))
    prefix = len(fe.tokenizer.encode("<|en|> "))
    assert small.budget("en") == 10 - prefix
    assert fe.budget("en") == 120 - prefix
    assert TextFrontEnd25(fe.tokenizer, TextConfig25(max_text_tokens=1)).budget("en") == 1
    text = "One, two, three, four, five, six, seven, eight, nine, ten."
    assert all(len(fe.tokenizer.encode(s)) <= small.budget("en") for s in small.process(text, "en").segments)
    assert small.count_tokens(text, "en") == len(fe.tokenizer.encode(fe.process(text, "en").special_upper))


def test_config_from_yaml_mapping() -> None:
    gpt = {"max_text_tokens": 402, "start_text_token": 7, "stop_text_token": 8}
    cfg = TextConfig25.from_config({"gpt": gpt})
    assert cfg == TextConfig25(402, 7, 8)
    assert TextConfig25.from_config({"max_text_tokens": 50}) == TextConfig25(50, 0, 1)
