"""One digest for every engine file: a component covers its external-data file too."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fasttts_cli.spec.engine_folder import component_sha256, file_sha256


def test_file_and_component_digests(tmp_path: Path) -> None:
    graph, data = tmp_path / "gpt.onnx", tmp_path / "gpt.onnx.data"
    graph.write_bytes(b"graph" * 1000)
    assert file_sha256(graph) == hashlib.sha256(b"graph" * 1000).hexdigest()
    assert component_sha256(graph) == file_sha256(graph)  # no data file: the graph alone
    data.write_bytes(b"weights" * 3000)
    assert component_sha256(graph) == hashlib.sha256(b"graph" * 1000 + b"weights" * 3000).hexdigest()
    data.write_bytes(b"weights" * 2999 + b"weightz")
    assert component_sha256(graph) != hashlib.sha256(b"graph" * 1000 + b"weights" * 3000).hexdigest()
