"""IndexTTS-2.5's GPT (UnifiedVoice25, campplus mode) against the original's vectors: the emotion chain
(3.1), the speaker vector (3.2), the emotion-vector mode (3.3), the language row, conds latent, text
embedding and prefix with its attention mask (3.4), the forced-code generation logits (3.5) and the
logits-processor scores on them (3.6). fp32 rel < 1e-4, integers exact; every size from the vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from fasttts_cli.indextts2 import emotion  # noqa: E402
from fasttts_cli.indextts2.sampling import SamplingParams, history_mask, process_logits  # noqa: E402
from fasttts_cli.indextts2.sampling_torch import RowParams, process_scores  # noqa: E402
from fasttts_cli.nets.unified_voice import Prefix  # noqa: E402
from fasttts_cli.tools.parity_torch import scores_match  # noqa: E402
from tests.parity import rel  # noqa: E402
from tests.parity25 import Parity25Case, check, need, tensor  # noqa: E402

pytestmark = pytest.mark.parity25
CACHE_TOL = 1e-5  # KV-cache vs full recomputation (the oracle's own self-check is 3e-7)


def _lang(case: Parity25Case) -> int:
    return int(case["text_main_lang_index"])


def _prefix(case: Parity25Case, gpt) -> Prefix:
    """Our prefix from the stored conditioning and the segment ids as infer_v2_5 hands them to the GPT."""
    spk = gpt.speaker_vector(tensor(case, "campplus_style"))
    return gpt.prefix_embeddings(
        spk, tensor(case, "emovec"), tensor(case, "text_main_segment_ids")[None], _lang(case)
    )


@torch.no_grad()
def test_stage_3_1_emotion_chain(parity25_case: Parity25Case, parity25_modules) -> None:
    c = parity25_case
    alpha = float(c.case["emo_alpha_used"])
    ec = parity25_modules.gpt.emotion_conditioning(
        tensor(c, "emo_cond_emb"), tensor(c, "spk_cond_emb"), alpha
    )
    for key in ("emo_conformer_out", "emo_perceiver_out", "emo_emovec_layer_out", "emo_base_conformer_out"):
        check(c, key, getattr(ec, key))
    check(c, "emovec", ec.emovec)


@torch.no_grad()
def test_stage_3_2_speaker_vector(parity25_case: Parity25Case, parity25_modules) -> None:
    c = parity25_case
    spk = parity25_modules.gpt.speaker_vector(tensor(c, "campplus_style"))
    assert spk.shape == (1, 1, c["gpt_spk_vec"].shape[-1])
    check(c, "gpt_spk_vec", spk[:, 0])


@torch.no_grad()
def test_stage_3_4_rows_and_prefix(parity25_case: Parity25Case, parity25_modules) -> None:
    c, gpt = parity25_case, parity25_modules.gpt
    lang = _lang(c)
    check(c, "gpt_lang_row", gpt.lang_row(lang))
    spk = gpt.speaker_vector(tensor(c, "campplus_style"))
    conds = gpt.conds_latent(spk, tensor(c, "emovec"))
    check(c, "gpt_conds_latent", conds)
    ids = tensor(c, "gpt_text_ids")[0]  # [start] + kept ids + [stop]
    check(c, "gpt_text_emb", gpt.text_embeddings25(ids[1:-1], lang)[None])

    # the segment ids still hold the stop id infer_v2_5 appends: the original strips it and pads the
    # prefix on the left with a masked zero row instead
    prefix = _prefix(c, gpt)
    check(c, "gpt_prefix_emb", prefix.embeds)
    want_mask = c["gpt_attention_mask"]  # prefix rows + the start-mel slot
    assert prefix.embeds.shape[1] + 1 == want_mask.shape[1]
    np.testing.assert_array_equal(prefix.mask.numpy(), want_mask[:, :-1])
    assert want_mask[0, -1] == 1
    n_pad = int(c.checks["gpt_prefix_left_pad_rows"])
    assert int(prefix.lengths[0]) == prefix.embeds.shape[1] - n_pad
    assert torch.count_nonzero(prefix.embeds[:, :n_pad]) == 0
    p = c["gpt_prefix_emb"].shape[1]
    assert p == gpt.cfg.n_conds + c["text_main_segment_ids"].shape[0] + 2  # P = 3 + L + 2, L as given
    # the fake input ids HF generate sees: P ones and the start-mel token
    assert c["gpt_gen_input_ids"].tolist() == [[1] * p + [gpt.cfg.start_mel_token]]


@torch.no_grad()
def test_stage_3_4_prefix_from_host_tables(parity25_case: Parity25Case, parity25_modules) -> None:
    """What a numpy runtime does around an exported trunk: table lookups give the same valid rows."""
    c, gpt = parity25_case, parity25_modules.gpt
    tab = {k: v.numpy() for k, v in gpt.host_tables().items()}
    ids = c["gpt_text_ids"][0]
    text = tab["text_embedding"][ids] + tab["text_pos"][: len(ids)] + tab["lang_embedding"][_lang(c)]
    conds = c["gpt_conds_latent"][0]
    n_pad = int(c.checks["gpt_prefix_left_pad_rows"])
    assert rel(np.concatenate([conds, text]), c["gpt_prefix_emb"][0, n_pad:]) < 1e-4


@torch.no_grad()
def test_stage_3_5_forced_generation_logits(parity25_case: Parity25Case, parity25_modules) -> None:
    c, gpt = parity25_case, parity25_modules.gpt
    need(c, "gpt_forced_codes", "gpt_gen_logits", "gpt_gen_hidden", "gpt_mel_positions")
    codes = tensor(c, "gpt_forced_codes")[None]
    n = codes.shape[1]
    assert c["gpt_gen_logits"].shape[1] == n + 1
    prefix = _prefix(c, gpt)
    fd = gpt.decode_forced(prefix, codes)
    check(c, "gpt_gen_logits", fd.logits)
    # gpt_gen_hidden is GPT-2's output after ln_f; ours adds the final_norm the mel head reads
    r = rel(fd.hidden[0].numpy(), gpt.final_norm(tensor(c, "gpt_gen_hidden"))[0].numpy())
    assert r < 1e-4, r

    # the same logits without a cache, at the positions the original used (start 0, code k at k + 2)
    pos = tensor(c, "gpt_mel_positions")
    assert pos.tolist() == [0, *range(2, n + 2)]
    mel_ids = torch.cat([torch.tensor([gpt.cfg.start_mel_token]), codes[0]])
    x = torch.cat([prefix.embeds, gpt.mel_input_embedding(mel_ids[None], pos[None])], dim=1)
    mask = torch.cat([prefix.mask, torch.ones(1, n + 1, dtype=torch.long)], dim=1)
    logits, hidden, _ = gpt.trunk(x, mask)
    p = prefix.embeds.shape[1]
    assert rel(logits[0, p:].numpy(), fd.logits[0].numpy()) < CACHE_TOL
    assert rel(hidden[0, p:].numpy(), gpt.final_norm(tensor(c, "gpt_gen_hidden"))[0].numpy()) < 1e-4
    check(c, "gpt_gen_logits", logits[:, p:])
    # a tight prefix (the masked pad rows dropped) gives the same logits: the pad rows are invisible
    n_pad = int(c.checks["gpt_prefix_left_pad_rows"])
    tight = Prefix(prefix.embeds[:, n_pad:], prefix.mask[:, n_pad:], prefix.lengths)
    assert rel(gpt.decode_forced(tight, codes).logits.numpy(), fd.logits.numpy()) < CACHE_TOL


@torch.no_grad()
@pytest.mark.parity25_needs("emo_vec_weights", "emo_vec_proto_index", "emo_vec_mat", "emo_vec_emovec")
def test_stage_3_3_emotion_vector_mode(
    parity25_case: Parity25Case, parity25_checkpoint: Path, parity25_modules
) -> None:
    """infer(emo_vector=w): the feat1 prototype nearest the style per category picks the feat2 row."""
    c, m = parity25_case, parity25_modules
    need(c, "emo_vec_weights", "emo_vec_proto_index", "emo_vec_mat", "emo_vec_emovec")
    cfg = yaml.safe_load((parity25_checkpoint / "config.yaml").read_text(encoding="utf-8"))
    mats = emotion.EmotionMatrices(m.spk_matrix, m.emo_matrix, tuple(cfg["emo_num"]))
    # the style from our CAM++, so the prototype choice is ours end to end (margin in the sidecar)
    style = m.campplus(tensor(c, "campplus_fbank")[None]).numpy()
    assert float(c.checks["emo_vec_proto_min_margin"]) > 1e-3
    proto, mat_vec, emovec = emotion.emotion_vector_mode(style, c["emo_vec_weights"], c["emovec"], mats)
    np.testing.assert_array_equal(proto, c["emo_vec_proto_index"])
    check(c, "emo_vec_mat", mat_vec)
    check(c, "emo_vec_emovec", emovec)


def _proc_modes(case: Parity25Case) -> list[tuple[str, int, dict]]:
    """(mode, num_beams, the processors' settings) as the original's generate built them."""
    recorded = case.checks["logits_processors"]
    return [(mode, int(r["num_beams"]), r["params"]) for mode, r in recorded.items()]


def test_stage_3_6_defaults_are_the_original_processors(parity25_case: Parity25Case) -> None:
    c = parity25_case
    need(c, "gpt_proc_beam_scores")
    for mode, beams, params in _proc_modes(c):
        ours = SamplingParams(beams=beams)
        assert list(params) == [
            "RepetitionPenaltyLogitsProcessor",
            "TemperatureLogitsWarper",
            "TopKLogitsWarper",
            "TopPLogitsWarper",
        ], mode
        assert params["RepetitionPenaltyLogitsProcessor"]["penalty"] == ours.repetition_penalty
        assert params["TemperatureLogitsWarper"]["temperature"] == ours.temperature
        assert params["TopKLogitsWarper"]["top_k"] == ours.top_k
        assert params["TopPLogitsWarper"]["top_p"] == ours.top_p
        assert params["TopPLogitsWarper"]["min_tokens_to_keep"] == ours.min_tokens_to_keep
        assert c.checks["logits_processors"][mode]["first_call_history_is_fake_ids"]


@torch.no_grad()
def test_stage_3_6_logits_processors(parity25_case: Parity25Case) -> None:
    """Row k's history is the fake input ids (P ones, the start-mel token) then the forced codes
    c_0..c_{k-1}; fed the STORED logits, so near-ties at the cuts cannot flip (margins in the sidecar)."""
    c = parity25_case
    need(c, "gpt_gen_logits", "gpt_gen_input_ids", "gpt_forced_codes")
    logits = c["gpt_gen_logits"][0]  # (n+1, V)
    prefix, codes = c["gpt_gen_input_ids"][0].tolist(), c["gpt_forced_codes"].tolist()
    seen = history_mask([prefix + codes[:k] for k in range(logits.shape[0])], logits.shape[1])
    for mode, beams, _ in _proc_modes(c):
        key = f"gpt_proc_{mode}_scores"
        need(c, key)
        want = c[key]
        assert want.shape == logits.shape
        assert float(c.checks[f"gpt_proc_{mode}_topk_min_gap"]) > 1e-5
        params = SamplingParams(beams=beams)
        assert scores_match(process_logits(logits, seen, params), want) < 1e-4, (mode, "numpy")
        rp = RowParams.build([params] * logits.shape[0], 1, "cpu")
        got = process_scores(
            torch.from_numpy(logits), torch.from_numpy(seen), rp, beam_mode=beams > 1, do_sample=True
        )
        assert scores_match(got.numpy(), want) < 1e-4, (mode, "torch")
