"""`torch` for IndexTTS-2.5: a 2.5 checkpoint folder on PyTorch (CUDA when present), no `fasttts build`.

The 2.5 synthesizer's segments (the request's language, the language row in the prefix) over
`TorchEngine25`, with `TorchSynthesizer`'s loading and identity (checkpoint digest + preset keys + code
revision + device), so a job treats a 2.5 checkpoint folder with a torch preset as it treats a v2 one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fasttts_cli.indextts2.synthesizer_torch import TorchSynthesizer
from fasttts_cli.indextts25.engine_torch import TorchEngine25
from fasttts_cli.indextts25.synthesizer import COUNT_LANGUAGE, IndexTTS25Synthesizer


class TorchSynthesizer25(TorchSynthesizer, IndexTTS25Synthesizer):
    torch_engine = TorchEngine25

    @classmethod
    def tokenizer_counter(cls, path: Path | str) -> Callable[[str], int]:
        """count_tokens from the checkpoint's tiktoken file and config alone (no model loaded)."""
        from fasttts_cli.indextts25.text import TextFrontEnd25
        from fasttts_cli.nets.config import load_config
        from fasttts_cli.nets.release_layout25 import MODEL_V25, find_config25
        from fasttts_cli.nets.tiktoken_ranks import TOKENIZER_FILE

        root = Path(path)
        cfg = load_config(find_config25(root), MODEL_V25)
        front = TextFrontEnd25.load(root / TOKENIZER_FILE, cfg.raw["gpt"])
        return lambda text: int(front.count_tokens(text, COUNT_LANGUAGE))
