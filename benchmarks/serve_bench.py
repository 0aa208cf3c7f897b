"""Serving benchmark on CPU engines: first audio and throughput at 1, 4 and 16 clients, streaming vs
whole-line, `fasttts serve` vs one `fasttts synth` process per line (fasttts_cli/tools/serve_bench.py says
how each is measured). One run, modes alternated.

    python benchmarks/serve_bench.py --voice REF.wav --engine tiny=ENGINE_DIR [--engine parity=DIR]
    python benchmarks/serve_bench.py --voice REF.wav --build-tiny /tmp/tiny-engine [--preset P.toml]

`--build-tiny DIR` writes the tiny random checkpoint (stop bias 0: every line runs to max_tokens, so line
lengths do not depend on a sampled stop) and builds its cpu-fp32 engine into DIR when DIR has none. The
parity-size engine is the one tests/conftest_engine.py builds into tests/.cache (parity-engine-seed*).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fasttts_cli.tools.serve_bench import main as bench_main


def build_tiny(out: Path) -> Path:
    if (out / "manifest.json").is_file():
        return out
    import torch

    from fasttts_cli.build.export import build_engine
    from fasttts_cli.build.tiny import write_tiny_checkpoint

    torch.set_num_threads(1)
    ckpt = write_tiny_checkpoint(out.parent / f"{out.name}-ckpt", stop_bias=0.0)
    return build_engine(ckpt, "cpu-fp32", out, overwrite=True)


def main() -> int:
    argv = sys.argv[1:]
    if "--build-tiny" in argv:
        i = argv.index("--build-tiny")
        out = build_tiny(Path(argv[i + 1]))
        argv = [*argv[:i], *argv[i + 2 :], "--engine", f"tiny={out}"]
    return bench_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
