"""The text normaliser around its grammar, the original's segmenting quirks, the v2 front end.

Every step is checked against the original line by line in test_frontend_numbers.py (IndexTTS-2) and
test_parity25_frontend.py (2.5); here the steps are pinned one by one, with the real grammar
(WeTextProcessing, loaded once per process) and with the identity in its place.
"""

from __future__ import annotations

import pytest

from fasttts_cli.indextts2.text import TextFrontEnd, split_segments, tokenize_by_cjk_char
from fasttts_cli.indextts2.text_grammar import IDENTITY
from fasttts_cli.indextts2.text_normalize import normalize, use_chinese
from tests.parity import parity_dir, spec_folder


@pytest.mark.parametrize(
    ("text", "read", "around"),
    [
        ("I have 3 apples.", "I have three apples.", "I have 3 apples."),
        ("It costs $12.50 now", "It costs twelve point five dollars now", "It costs $12.50 now"),
        ("KJAZZ 103", "KJAZZ one hundred and three", "KJAZZ 103"),
        ("Pages 54-90 are missing.", "Pages fifty four to ninety are missing.", "Pages 54-90 are missing."),
        ("Meet at 8:30 or 9:00", "Meet at eight thirty or nine o'clock", "Meet at 8,30 or 9,00"),
        ("what's up? It's fine, he's here", "what is up? It is fine, he is here", None),
        ("Use GPT-5-nano (fast)", "Use GPT-five-nano 'fast'", "Use GPT-5-nano 'fast'"),
        ('He said: "wait..."', "He said, 'wait…'", None),
    ],
)
def test_normalize_english(text: str, read: str, around: str | None) -> None:
    # `read`: with WeTextProcessing; `around`: the original's own steps only (None: the same)
    assert not use_chinese(text)
    assert normalize(text) == read
    assert normalize(text, IDENTITY) == (around or read)


@pytest.mark.parametrize(
    ("text", "read", "around"),
    [
        ("我有3个苹果。", "我有三个苹果.", "我有3个苹果."),
        ("2025年共465篇，约315万字", "二零二五年共四百六十五篇,约三百一十五万字", "2025年共465篇,约315万字"),
        ("50%的人", "百分之五十的人", "50%的人"),
        ("现在是20:05", "现在是二十点零五分", "现在是20,05"),
        ("电话0135", "电话零幺三五", "电话0135"),
        ("“你好”（测试）！", "'你好''测试'!", None),
        ("晕xuan4是一种gan3觉", "晕XVAN4是一种gan3觉", None),  # tone pinyin kept (j/q/x + u -> v)
        ("今天是个好日子 it's a good day", "今天是个好日子 it is a good day", None),
        ("读<行|xing2>和12", "读<行|xing2>和十二", "读<行|xing2>和12"),  # annotations kept
        ("我们儿的作业，嗯", "我们儿的作业,嗯", None),  # erhua and interjections kept (original's options)
        ("约瑟夫·高登-莱维特2012年", "约瑟夫-高登-莱维特二零一二年", "约瑟夫-高登-莱维特2012年"),
    ],
)
def test_normalize_chinese(text: str, read: str, around: str | None) -> None:
    assert use_chinese(text)
    assert normalize(text) == read
    assert normalize(text, IDENTITY) == (around or read)


def test_route_choice_follows_the_original() -> None:
    assert use_chinese("123")  # no Latin letter
    assert use_chinese("me@example.com")
    assert use_chinese("zhong4 yao4")  # tone pinyin
    assert not use_chinese("beta1 and voice2")


def test_cjk_split_uppercases_and_keeps_punctuation_on_the_latin_side() -> None:
    assert tokenize_by_cjk_char("你好世界是 hello world 的中文") == "你 好 世 界 是 HELLO WORLD 的 中 文"
    assert tokenize_by_cjk_char("  你好世界,this is it! ") == "你 好 世 界 ,THIS IS IT!"
    assert tokenize_by_cjk_char("straße") == "STRASSE"


# -------------------------------------------------------------------------------------- segmenting


def test_split_cuts_after_sentence_end_only_past_two_tokens() -> None:
    toks = ["A", ".", "B", "C", "D", ".", "E", "F"]
    # "A ." is not cut (2 tokens); "A . B C D ." is; merging then joins what fits
    assert split_segments(toks, 120) == [toks]
    assert split_segments(toks, 6) == [["A", ".", "B", "C", "D", "."], ["E", "F"]]


def test_split_quote_after_cut_closes_and_reopens() -> None:
    toks = ["A", "B", "C", ".", "'", "D"]
    assert split_segments(toks, 6) == [["A", "B", "C", ".", "'"], ["'", "D"]]
    # merged back when it fits: the quote then appears twice, as in the original
    assert split_segments(toks, 120) == [["A", "B", "C", ".", "'", "'", "D"]]


def test_split_flushes_at_comma_and_hard_splits_long_runs() -> None:
    toks = ["A", ",", "B", "C", "D", "E", "."]
    with pytest.warns(RuntimeWarning):
        segs = split_segments(toks, 4)
    assert segs == [["A", ","], ["B", "C", "D", "E"], ["."]]
    assert all(len(s) <= 4 for s in segs)


def test_split_at_dash_and_merges_small_pieces() -> None:
    toks = ["A", "B", "C", "-", "D", "E", "F", "?", "G"]
    assert split_segments(toks, 4) == [["A", "B", "C", "-"], ["D", "E", "F", "?"], ["G"]]
    assert split_segments(toks, 9) == [toks]


def test_split_quick_streaming_keeps_the_first_piece_short() -> None:
    toks = ["A", "B", "C", "."] * 4
    assert split_segments(toks, 12) == [toks[:12], toks[12:]]
    # no merging until more than `quick_streaming_tokens` tokens have gone by (unless within max/2)
    assert split_segments(toks, 12, quick_streaming_tokens=10) == [toks[:4], toks[4:]]


# ---------------------------------------------------------------------------------------- front end


@pytest.fixture
def front_end() -> TextFrontEnd:
    path = spec_folder(parity_dir()) / "bpe.model"
    if not path.is_file():
        pytest.skip("no bpe.model in the parity folder")
    return TextFrontEnd.load(path, max_text_tokens=80)


def test_front_end_numbers_reach_the_tokenizer(front_end: TextFrontEnd) -> None:
    assert front_end.tokenize("这是1个测试") == [p for c in "这是一个测试" for p in ("▁", c)]
    pieces = front_end.tokenize("it's 1 fox")
    assert "".join(pieces).replace("▁", " ").strip() == "IT IS ONE FOX"
    assert front_end.count_tokens("it's 1 fox") == len(front_end.encode("it's 1 fox")) == len(pieces)


def test_front_end_lone_character_is_encoded_raw(front_end: TextFrontEnd) -> None:
    assert front_end.tokenize(" x ") == list(front_end.sp.Encode(" x ", out_type=str))
    assert front_end.tokenize("") == []


def test_front_end_segment_limit_follows_config(front_end: TextFrontEnd) -> None:
    assert front_end.max_segment_tokens == 80
    text = "The quick brown fox, " * 30
    segs = front_end.segments(text)
    assert len(segs) > 1 and all(len(s) <= 80 for s in segs)
    assert sum(len(s) for s in segs) == front_end.count_tokens(text)
    assert all(len(s) <= 20 for s in front_end.segments(text, max_tokens=20))
    assert TextFrontEnd(max_text_tokens=None).max_segment_tokens == 120
