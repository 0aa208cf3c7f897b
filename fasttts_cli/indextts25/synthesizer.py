"""`indextts2.5`: the IndexTTS-2.5 engine behind the Synthesizer protocol, on v2's synthesizer.

The flow, the batching, the per-segment generators and the two phases (plan: the GPT's codes; render:
codec decode, s2mel at the natural int(2n * 1.72) frames or at exactly `frames * hop` samples, CFM,
vocoder) are IndexTTS2Synthesizer's; 2.5 differs in what a segment is: its text goes through the 2.5 front
end in the request's language (`SynthRequest.lang`, which 2.5 must be told: it has no language
detection), and its prefix carries that language's embedding row (IndexTTS25Engine.prefix25).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fasttts_cli.errors import UsageError
from fasttts_cli.indextts2.line_options import line_options
from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer, _Segment
from fasttts_cli.indextts2.voice import VoiceConditioning
from fasttts_cli.indextts25.components import MODEL_ID25
from fasttts_cli.indextts25.engine import IndexTTS25Engine, load_text_front_end25
from fasttts_cli.spec.engine_folder import read_manifest
from fasttts_cli.synth import synthesizer as contract

COUNT_LANGUAGE = "en"  # token counts for estimates: the prefix costs the same in every language


class IndexTTS25Synthesizer(IndexTTS2Synthesizer):
    """Synthesizer for an IndexTTS-2.5 engine folder (see the module docstring)."""

    name = "indextts2.5"
    code_tag = "indextts25"
    languages = ("zh", "en", "ja", "es", "ar")  # what the 2.5 release was trained on
    needs_language = True

    engine: IndexTTS25Engine  # type: ignore[assignment]

    engine_class = IndexTTS25Engine

    @classmethod
    def tokenizer_counter(cls, path: Path | str) -> Callable[[str], int]:
        folder = Path(path)
        front = load_text_front_end25(folder, read_manifest(folder, expect_model=MODEL_ID25))
        return lambda text: int(front.count_tokens(text, COUNT_LANGUAGE))

    def count_tokens(self, text: str) -> int:
        return int(self.engine.text.count_tokens(text, COUNT_LANGUAGE))

    def _segments(self, i: int, r: contract.SynthRequest) -> list[_Segment]:
        e = self.engine
        if not r.lang:
            raise UsageError(
                f"line {r.line_id}: IndexTTS-2.5 needs the text's language",
                hint=f"pass --lang ({', '.join(self.languages)})",
            )
        cond = r.voice.state
        if not isinstance(cond, VoiceConditioning):
            cond = self.prepare_voice(r.voice.path, name=r.voice.name, emotion=r.voice.emotion).state
        opts = line_options(e.preset, r.options)
        params = opts.sampling(e.tokens.stop_mel, e.max_codes)
        front = e.text
        lang = front.check_language(r.lang)
        row = front.lang_index(lang)
        ids = front.segments(r.text, lang, e.max_text_tokens)
        return [
            _Segment(
                i, k, e.prefix25(cond.spk_latents, cond.emovec, s, row), cond, params, opts.s2mel, int(r.seed)
            )
            for k, s in enumerate(ids)
        ]
