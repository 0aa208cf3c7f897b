"""Flags every command takes work before the command name too, and `presets` says whether a preset can be
built, run, or both (a build-only machine is not shown as runnable)."""

from __future__ import annotations

import json
import subprocess
import sys

from fasttts_cli.backends import gpu_stack
from fasttts_cli.cli.commands import _hoist_global_flags
from fasttts_cli.cli.engines import _HERE
from fasttts_cli.spec.presets import load_preset


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fasttts_cli", *args], capture_output=True, text=True)


def test_json_before_the_command_is_one_json_object():
    proc = _run("--json", "presets")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["command"] == "presets"


def test_hoisting_leaves_everything_else_alone():
    assert _hoist_global_flags(["--json", "-q", "doctor", "--x"]) == ["doctor", "--json", "-q", "--x"]
    assert _hoist_global_flags(["--version"]) == ["--version"]
    assert _hoist_global_flags(["--bogus", "doctor"]) == ["--bogus", "doctor"]
    assert _hoist_global_flags(["dub", "a.srt", "--json"]) == ["dub", "a.srt", "--json"]


def test_a_gpu_preset_on_a_machine_without_a_gpu_is_build_only_and_says_why():
    stack = gpu_stack.GpuStack(torch="2.13.0", onnx="1.16", torch_cuda=False)
    st = gpu_stack.preset_status(load_preset("gpu-torch-fp16"), stack)
    assert _HERE[st.can_build, st.can_run] == "build only"
    assert st.missing and all("(to run)" in m for m in st.missing)
