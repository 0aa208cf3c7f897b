"""Helpers of the fault tests: the CLI run in-process, and the gated fake engine that real `fasttts`
processes load in the lock tests."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fasttts_cli.synth.synthesizer import SynthRequest, SynthResult
from tests.test_pipeline import FakeSynth


def run_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    """`fasttts ARGS` in this process: (exit code, stdout, stderr)."""
    from fasttts_cli.cli.commands import main

    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return int(ei.value.code or 0), cap.out, cap.err


class Gated(FakeSynth):
    """test_pipeline's fake engine, steered by the environment of the process that loads it: every text it
    is asked for is appended to $FAULT_LOG, $FAULT_STARTED is touched when synthesis starts (the run holds
    its lock by then), and with $FAULT_GATE synthesis waits until that file exists."""

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        if os.environ.get("FAULT_LOG"):
            with open(os.environ["FAULT_LOG"], "a", encoding="utf-8") as f:
                f.writelines(r.text + "\n" for r in requests)
        if os.environ.get("FAULT_STARTED"):
            Path(os.environ["FAULT_STARTED"]).touch()
        gate = os.environ.get("FAULT_GATE")
        while gate and not Path(gate).exists():
            time.sleep(0.02)
        return super().synthesize(requests)


# `fasttts ARGV` through the real CLI with the Gated engine, whichever way the command loads its engine
# (dub through the pipeline, batch through engine_load).
RUNNER = r"""
import sys
from fasttts_cli.app import engine_load, pipeline
from tests.faults import Gated

pipeline.load_synthesizer = engine_load.load_synthesizer = lambda *a, **k: Gated()
from fasttts_cli.cli.commands import main
main(sys.argv[1:])
"""
