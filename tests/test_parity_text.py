"""Stage 2 parity: CJK splitting + uppercasing, SentencePiece, segmenting, GPT text ids.

The vectors' `text_normalized` came from the original with its WeTextProcessing step replaced by the
identity; their texts hold no number or symbol the grammar reads, so the real grammar gives the same
string (checked below). Lines full of numbers, through the original with the real WeTextProcessing, are in
test_frontend_numbers.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasttts_cli.indextts2.text import TextFrontEnd, split_segments
from tests.parity import ParityCase

pytestmark = pytest.mark.parity


def _front_end(case: ParityCase) -> TextFrontEnd:
    path = case.spec / "bpe.model"
    if not path.is_file():
        pytest.skip(f"no bpe.model in {case.spec}")
    return TextFrontEnd.load(path)


def test_stage_2_tokenization(parity_case: ParityCase) -> None:
    fe = _front_end(parity_case)
    normalized = str(parity_case["text_normalized"])
    assert fe.pretokenize(normalized) == str(parity_case["text_pretokenized"])
    pieces = fe.pieces_of_normalized(normalized)
    assert pieces == [str(p) for p in parity_case["text_pieces"]]
    np.testing.assert_array_equal(fe.ids(pieces), parity_case["text_ids"])


def test_stage_2_segments(parity_case: ParityCase) -> None:
    fe = _front_end(parity_case)
    pieces = [str(p) for p in parity_case["text_pieces"]]
    segs = split_segments(pieces, int(parity_case.case["max_text_tokens_per_segment"]))
    np.testing.assert_array_equal([len(s) for s in segs], parity_case["text_segment_lengths"])
    seg_ids = [fe.ids(s) for s in segs]
    np.testing.assert_array_equal(np.concatenate(seg_ids), parity_case["text_segment_ids"])
    np.testing.assert_array_equal([seg_ids[int(parity_case.case["segment"])]], parity_case["gpt_text_ids"])


def test_stage_2_front_end_with_identity_normalizer(parity_case: ParityCase) -> None:
    # the whole front end, normaliser swapped for the identity like the vectors' generator did
    fe = _front_end(parity_case)
    fe.normalizer = None
    max_tokens = int(parity_case.case["max_text_tokens_per_segment"])
    segs = fe.segments(str(parity_case["text_normalized"]), max_tokens)
    np.testing.assert_array_equal(np.concatenate(segs), parity_case["text_segment_ids"])
    assert fe.count_tokens(str(parity_case["text_normalized"])) == len(parity_case["text_ids"])


def test_stage_2_normalisation_with_the_real_grammar(parity_case: ParityCase) -> None:
    fe = _front_end(parity_case)
    assert fe.normalize(str(parity_case.case["text_input"])) == str(parity_case["text_normalized"])
