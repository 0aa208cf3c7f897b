"""Keep third-party build noise off the user's terminal.

The legacy ONNX exporter prints one C++ warning per custom-op node (hundreds for the GQA trunk) straight
to file descriptor 2, where Python's `warnings` filters cannot reach it, and ONNX Runtime's quantizer
warns through the root logger, which makes Python configure a root handler as a side effect. During a
build step both go to a temporary file instead: replayed on stderr if the step fails (they may explain
why), logged at debug level (`-v`) when it succeeds.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

LOG = logging.getLogger("fasttts")


@contextmanager
def quiet_native_output(step: str) -> Iterator[None]:
    """Capture fd 2 and root-logger records while `step` runs (see the module docstring)."""
    sys.stderr.flush()
    saved = os.dup(2)
    root = logging.getLogger()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        records = io.StringIO()
        handler = logging.StreamHandler(records)
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        root.addHandler(handler)
        os.dup2(sink.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            root.removeHandler(handler)
            handler.close()
            sink.seek(0)
            text = (sink.read().decode("utf-8", "replace") + records.getvalue()).strip()
            if text and failed:
                sys.stderr.write(f"fasttts: output of {step} before it failed:\n{text}\n")
                sys.stderr.flush()
            elif text:
                LOG.debug("%s printed %d line(s):\n%s", step, text.count("\n") + 1, text)
