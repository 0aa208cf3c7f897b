"""ONNX files and folders as the build writes them: loaded with their external data, saved atomically, weights
moved to one `<name>.data` file when the graph would pass protobuf's 2 GB limit; a folder staged beside its
destination and swapped in whole."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EXTERNAL_DATA_BYTES = 2_000_000_000


def load_model(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=True)


def save_model(model: Any, dst: Path) -> None:
    """Save atomically; weights go to one `<name>.data` file when the graph would pass 2 GB."""

    dst.parent.mkdir(parents=True, exist_ok=True)
    size = sum(t.ByteSize() for t in model.graph.initializer)
    external = size > EXTERNAL_DATA_BYTES
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        raw = Path(tmp) / dst.name
        write_onnx(model, raw, external=external)
        for f in Path(tmp).iterdir():
            os.replace(f, dst.parent / f.name)


def write_onnx(model: Any, path: Path, *, external: bool) -> None:
    """One onnx.save_model: with `external`, every weight in one `<name>.data` beside the graph."""
    import onnx

    onnx.save_model(
        model,
        str(path),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=1024,
    )


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A new hidden folder beside `out` to write into. When the block ends it replaces `out` in one rename
    (a reader never sees half a folder); when the block raises it is removed and `out` is left as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def weight_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
