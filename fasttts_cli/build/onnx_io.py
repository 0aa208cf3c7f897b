"""ONNX files as the build writes them: loaded with their external data, saved atomically, weights moved
to one `<name>.data` file when the graph would pass protobuf's 2 GB limit."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

EXTERNAL_DATA_BYTES = 2_000_000_000


def load_model(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=True)


def save_model(model: Any, dst: Path) -> None:
    """Save atomically; weights go to one `<name>.data` file when the graph would pass 2 GB."""
    import onnx

    dst.parent.mkdir(parents=True, exist_ok=True)
    size = sum(t.ByteSize() for t in model.graph.initializer)
    external = size > EXTERNAL_DATA_BYTES
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        raw = Path(tmp) / dst.name
        onnx.save_model(
            model,
            str(raw),
            save_as_external_data=external,
            all_tensors_to_one_file=True,
            location=dst.name + ".data",
            size_threshold=1024,
        )
        for f in Path(tmp).iterdir():
            os.replace(f, dst.parent / f.name)


def weight_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
