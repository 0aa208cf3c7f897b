"""`torch`: IndexTTS-2 on PyTorch (CUDA when present) behind the dubbing pipeline's Synthesizer protocol.

`TorchSynthesizer.load(checkpoint_dir, preset)` needs only a checkpoint directory in the official layout
(no `fasttts build`). Segmenting, batching (up to the preset's `limits.max_batch` segments per batch),
per-segment seeds, the 200 ms segment gaps, per-line option overrides and per-line error isolation are
`IndexTTS2Synthesizer`'s, driving a `TorchEngine` instead of the ONNX engine, so both backends treat
lines the same way. Voice conditioning is cached on disk like the ONNX backend's, keyed by this
engine's identity (checkpoint digest + preset build keys).

Sampling draws come from a counter-based hash of each segment's seed (drawn from the same per-segment
numpy generator the ONNX backend uses), so a line's audio never depends on its batch-mates; the codes are
not the ONNX backend's codes for the same seed (different random stream, and fp16 logits), by design.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from fasttts_cli.indextts2.engine_torch import TorchEngine
from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
from fasttts_cli.indextts2.voice_cache import VoiceCache
from fasttts_cli.spec.presets import Preset


class TorchSynthesizer(IndexTTS2Synthesizer):
    name = "torch"
    clones_voice = True
    torch_engine: type[TorchEngine] = TorchEngine  # the model's engine class on this backend

    def __init__(self, engine: TorchEngine, cache: VoiceCache | None = None) -> None:
        super().__init__(engine, cache)  # type: ignore[arg-type]  # both implement indextts2.stages.EngineStages

    @classmethod
    def load(  # type: ignore[override]
        cls,
        checkpoint_dir: Path | str,
        preset: Preset | str | Path = "gpu-torch-fp16",
        *,
        device: torch.device | str | None = None,
        cache_dir: Path | str | None = None,
    ) -> TorchSynthesizer:
        engine = cls.torch_engine.load(checkpoint_dir, preset, device=device)
        return cls(engine, VoiceCache(cache_dir) if cache_dir is not None else None)

    @classmethod
    def tokenizer_counter(cls, path: Path | str) -> Callable[[str], int]:
        """count_tokens from the checkpoint's bpe.model alone (no model loaded)."""
        from fasttts_cli.indextts2.text import TextFrontEnd
        from fasttts_cli.nets.config import load_config

        root = Path(path)
        cfg = load_config(root / "config.yaml")
        limit = int(cfg.raw["gpt"]["max_text_tokens"])
        return TextFrontEnd.load(root / cfg.bpe_model, max_text_tokens=limit).count_tokens

    def identity(self) -> str:
        e: TorchEngine = self.engine  # type: ignore[assignment]
        p = e.preset
        run = json.dumps(p.run_keys(), sort_keys=True)
        limits = json.dumps(asdict(p.limits), sort_keys=True)
        return f"{e.identity()}|run={run}|limits={limits}|code={e.code_identity()}"
