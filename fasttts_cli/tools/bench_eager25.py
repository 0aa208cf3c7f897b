"""`fasttts bench`'s eager side for IndexTTS-2.5: the build-side PyTorch modules (nets.checkpoint25) run
the way `indextts/infer_v2_5.py` runs them, one line at a time at batch 1 (beams as rows).

Voice preparation in the original's order (infer_v2_5.py:627-690): w2v-BERT (every layer) on the speaker,
then again on the same features (its unused `S_ref`), the reference mel, CAM++, the prompt condition
LR(spk_cond_emb) on the continuous features, w2v-BERT on the emotion audio; then the emotion vector and the
speaker row spk_emb_proj(style), which our engine keeps with the voice (v2's eager side does the same).
Per line: the prefix with its language row, generation (bench_eager.generate, shared with v2), then
EnhancedCodec.decode (codec_decode_s) and the length regulator to int(2n * 1.72) frames (together
s2mel_content_s, as on our side), CFM, BigVGAN. There is no latent pass (latent_s None).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fasttts_cli.tools import bench_common as common
from fasttts_cli.tools.bench_eager import EagerModel, EagerVoice, w2v_features

LANG_INDEX = 0  # the language row our side uses too: every row costs the same


class EagerV25:
    """IndexTTS-2.5 (see the module docstring)."""

    w2v_passes = 3  # the speaker twice (S_ref), the emotion audio

    def load(self, checkpoint: Path) -> Any:
        from fasttts_cli.nets.checkpoint25 import load_checkpoint25

        return load_checkpoint25(checkpoint)

    def voice(self, em: EagerModel) -> EagerVoice:
        import torch

        from fasttts_cli.indextts2 import features as feat
        from fasttts_cli.nets.s2mel25 import prompt_condition25

        m, speaker, uv = em.modules, em.speaker, em.modules.gpt
        spk = w2v_features(em.w2v, speaker.audio_16k)
        w2v_features(em.w2v, speaker.audio_16k)  # the original's S_ref: computed, never used
        mel = torch.from_numpy(feat.log_mel(speaker.audio_22k))[None]
        _, fb = feat.campplus_fbank(speaker.audio_16k)
        style = m.campplus(torch.from_numpy(fb)[None])
        tm = torch.tensor([mel.shape[-1]])
        prompt = prompt_condition25(m.s2mel, spk, torch.tensor([spk.shape[1]]), tm)
        emo = w2v_features(em.w2v, em.emotion_16k)
        emovec = uv.emotion_conditioning(emo, spk, 1.0).emovec
        return EagerVoice((uv.speaker_vector(style), emovec), prompt, mel, style)

    def prefix(self, uv: Any, v: EagerVoice, text: Any) -> Any:
        return uv.prefix_embeddings(*v.cond, text, LANG_INDEX)

    def content(
        self, m: Any, v: EagerVoice, text: Any, codes: Any
    ) -> tuple[float | None, float, Any, dict[str, Any]]:
        """EnhancedCodec.decode, then the length regulator to int(2n * 1.72) frames; no latent pass."""
        import torch

        from fasttts_cli.nets.s2mel25 import content25

        t_codec, s_infer = common.timed(lambda: m.codec.decode(codes))
        t_lr, (cond, _) = common.timed(lambda: content25(m.s2mel, s_infer, torch.tensor([codes.shape[1]])))
        return None, t_codec + t_lr, cond, {"codec_decode_s": t_codec}
