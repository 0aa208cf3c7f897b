"""Build steps keep native stderr and root-logger noise off the terminal, but not when they fail."""

from __future__ import annotations

import logging
import os

import pytest

from fasttts_cli.build.quiet import quiet_native_output


def test_native_and_root_logger_output_is_held_back(capfd: pytest.CaptureFixture[str]) -> None:
    root_handlers = list(logging.getLogger().handlers)
    with quiet_native_output("a step"):
        os.write(2, b"[W shape_type_inference.cpp] Warning: noise\n")  # as C++ code writes it
        logging.getLogger("onnxruntime.quantization").warning("Please consider pre-processing")
    out, err = capfd.readouterr()
    assert "noise" not in err and "pre-processing" not in err and out == ""
    assert logging.getLogger().handlers == root_handlers
    os.write(2, b"after\n")  # fd 2 is back
    assert capfd.readouterr().err == "after\n"


def test_output_is_replayed_when_the_step_fails(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError, match="boom"), quiet_native_output("the export of x"):
        os.write(2, b"why it failed\n")
        raise RuntimeError("boom")
    err = capfd.readouterr().err
    assert "output of the export of x before it failed" in err and "why it failed" in err


def test_success_output_goes_to_the_debug_log() -> None:
    log = logging.getLogger("fasttts")
    seen: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda r: seen.append(r.getMessage())  # type: ignore[method-assign]
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        with quiet_native_output("a step"):
            os.write(2, b"detail\n")
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert any("a step printed 1 line(s)" in m and "detail" in m for m in seen)
