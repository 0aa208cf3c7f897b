#!/usr/bin/env python3
"""Regenerate the IndexTTS-2.5 parity checkpoint from keys25.json (this folder by default).

    python make_checkpoint25.py OUTDIR [--seed 0] [--spec DIR] [--force] [--no-verify] [--record]

The generator is tools/parity2/make_checkpoint.py, one for both generations (the v2 rules unchanged); this
name keeps the 2.5 spec as the default and the manifest make_checkpoint25.json. See README.md.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity2"))
import make_checkpoint

make_checkpoint.HERE = os.path.dirname(os.path.abspath(__file__))  # the default --spec: this folder

if __name__ == "__main__":
    make_checkpoint.main("indextts25-parity-keys/1")
