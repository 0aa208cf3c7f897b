"""One entry point for the GPU acceptance programs: `python3 -m fasttts_cli.tools.acceptance PROGRAM ...`.

    torch     fasttts_cli.tools.accept_torch     (the torch backend: parity + bench; runs on the lent GPU)
    tensorrt  fasttts_cli.tools.accept_tensorrt  (the TensorRT presets)
    trtllm    fasttts_cli.tools.accept_trtllm    (the TensorRT-LLM GPT)

Every program takes --prepare (tools/prepare.py: the offline wheels and the parity copy) and --sim-cpu
(the same program on the CPU, through fakes where a GPU library is needed), ends with one table and
returns its exit status.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

PROGRAMS = {
    "torch": "fasttts_cli.tools.accept_torch",
    "tensorrt": "fasttts_cli.tools.accept_tensorrt",
    "trtllm": "fasttts_cli.tools.accept_trtllm",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in PROGRAMS:
        print(
            f"usage: python3 -m fasttts_cli.tools.acceptance {{{','.join(PROGRAMS)}}} [options]",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(PROGRAMS[args[0]])
    return int(module.main(args[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
