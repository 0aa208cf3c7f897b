"""WeTextProcessing as the grammar step: loaded once per process and only when a line needs it, its
compiled Chinese grammar cached in the user's cache folder (never in the installed package), a clear
exit-3 error when it is missing.

Process-level behaviour is checked in fresh interpreters (`python -c`), since this one may have loaded the
grammars already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fasttts_cli.errors import ExitCode, MissingDependencyError
from fasttts_cli.indextts2 import text_grammar
from fasttts_cli.indextts2.text_normalize import normalize

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, os, sys, time
from pathlib import Path
import tn
from fasttts_cli.indextts2 import text_grammar
from fasttts_cli.indextts2.text import TextFrontEnd
from fasttts_cli.indextts25.text import TextFrontEnd25
package = Path(tn.__file__).parent
before = sorted(p.name for p in package.iterdir())
loaded_at_import = text_grammar.is_loaded() or "tn.chinese.normalizer" in sys.modules
zh = text_grammar.WETEXT.zh("电话0135，共465篇")
first = text_grammar.normalizers()
en = text_grammar.WETEXT.en("KJAZZ 103")
cache = first.zh_cache
print(json.dumps({
    "loaded_at_import": loaded_at_import, "zh": zh, "en": en, "same": first is text_grammar.normalizers(),
    "cache": cache and str(cache), "files": cache and sorted(p.name for p in cache.iterdir()),
    "mtime": cache and (cache / "zh_tn_verbalizer.fst").stat().st_mtime_ns,
    "package_unchanged": before == sorted(p.name for p in package.iterdir()),
}))
"""


def _probe(cache_home: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_grammars_load_lazily_once_and_cache_in_the_user_folder(tmp_path: Path) -> None:
    cold = _probe(tmp_path)
    assert not cold["loaded_at_import"], "importing the front ends must not load the grammars"
    assert cold["zh"] == "电话零幺三五,共四百六十五篇" and cold["en"] == "KJAZZ one hundred and three"
    assert cold["same"]
    cache = Path(cold["cache"])
    assert cache.is_relative_to(tmp_path / "fasttts" / "wetext")
    assert cold["files"] == ["zh_tn_tagger.fst", "zh_tn_verbalizer.fst"]
    assert cold["package_unchanged"], "nothing may be written into the installed WeTextProcessing"
    assert not [p for p in cache.parent.iterdir() if p.name.startswith(".build-")]
    warm = _probe(tmp_path)  # a second process reads the cache, it does not rebuild it
    assert warm["mtime"] == cold["mtime"] and warm["zh"] == cold["zh"]


def test_unwritable_cache_folder_still_normalises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    result = _probe(blocker)
    assert result["zh"] == "电话零幺三五,共四百六十五篇"
    assert result["cache"] is None  # built in a temporary folder, removed once loaded


def test_missing_wetextprocessing_is_exit_code_3(monkeypatch: pytest.MonkeyPatch) -> None:
    text_grammar._zh.cache_clear()
    monkeypatch.setattr(text_grammar, "_loaded", None)
    monkeypatch.setattr(text_grammar.platform, "system", lambda: "Linux")
    for name in ("tn", "tn.chinese", "tn.chinese.normalizer", "tn.english", "tn.english.normalizer"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: the import fails
    with pytest.raises(MissingDependencyError) as err:
        normalize("我有3个苹果")
    assert err.value.exit_code == ExitCode.MISSING
    assert "WeTextProcessing" in str(err.value) and "pip install" in str(err.value)
    text_grammar._zh.cache_clear()


def test_other_platforms_use_wetext_with_the_originals_options(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []

    class FakeWetext:  # records how the original constructs it (front.py, non-Linux branch)
        def __init__(self, **kw: object) -> None:
            calls.append(kw)

    module = type(sys)("wetext")
    module.Normalizer = FakeWetext  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wetext", module)
    monkeypatch.setattr(text_grammar, "_loaded", None)
    monkeypatch.setattr(text_grammar.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(text_grammar, "_reference_installed", lambda: False)  # no pynini wheel there
    loaded = text_grammar.normalizers()
    assert calls == [
        {"remove_erhua": False, "lang": "zh", "operator": "tn"},
        {"lang": "en", "operator": "tn"},
    ]
    assert loaded.backend.startswith("wetext") and loaded.zh_cache is None


@pytest.mark.parametrize("machine", ["aarch64", "x86_64"])
def test_linux_without_pynini_falls_back_to_wetext(monkeypatch: pytest.MonkeyPatch, machine: str) -> None:
    """Linux on Arm has no pynini wheel (and a machine may lack the 155 MB wheel): wetext, as off Linux;
    doctor says it is not the reference path where the reference path could be installed."""
    module = type(sys)("wetext")
    module.Normalizer = lambda **kw: kw  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wetext", module)
    monkeypatch.setattr(text_grammar, "_loaded", None)
    monkeypatch.setattr(text_grammar.platform, "system", lambda: "Linux")
    monkeypatch.setattr(text_grammar.platform, "machine", lambda: machine)
    versions = {"wetext": "0.1.0"}
    monkeypatch.setattr(text_grammar, "_version", lambda d: versions.get(d, "unknown"))
    assert text_grammar.normalizers().backend == "wetext 0.1.0"
    found, detail, _ = text_grammar.describe()
    assert found and detail.startswith("wetext 0.1.0")
    assert ("not the reference path" in detail) == (machine == "x86_64")
    versions.clear()  # neither installed: doctor names what this platform needs
    found, detail, hint = text_grammar.describe()
    assert not found and ("pynini" in detail) == (machine == "x86_64") and "pip install" in hint


DRAFT_RUN = """
import sys
from fasttts_cli.cli.commands import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
print(json.dumps({"code": code, "loaded": sorted({"tn", "pynini", "wetext"} & set(sys.modules))}))
"""


@pytest.mark.parametrize("command", ["dub", "inspect"])
def test_draft_voice_dry_run_and_inspect_never_load_the_grammars(command: str, tmp_path: Path) -> None:
    args = [str(REPO / "samples/demo.srt"), "--voice", str(REPO / "samples/voices/alice.wav")]
    if command == "dub":
        args += ["--dry-run", "--output-dir", str(tmp_path / "o")]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + DRAFT_RUN, command, *args, "--json"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}, out.stderr[-2000:]


def test_doctor_reports_the_normaliser_without_loading_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttts_cli.app.doctor import check_text_normaliser

    monkeypatch.setattr(text_grammar, "_loaded", None)
    (row,) = check_text_normaliser()
    assert row.status == "ok" and "WeTextProcessing 1.0.4.1 / pynini 2.1.6" in row.detail
    assert not text_grammar.is_loaded()
    monkeypatch.setattr(text_grammar, "_version", lambda dist: "unknown")
    (row,) = check_text_normaliser()
    assert row.status == "missing" and "pip install" in row.fix
