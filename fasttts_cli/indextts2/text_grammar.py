"""The grammar step of text normalisation: WeTextProcessing, as the original runs it.

The original (indextts/utils/front.py, TextNormalizer.load) normalises Chinese and English with
WeTextProcessing's pynini grammars on Linux and with `wetext` (the same grammars compiled, on kaldifst)
on macOS and Windows; we do the same, with its exact options: Chinese `remove_interjections=False,
remove_erhua=False` (cached tagger/verbalizer files, `overwrite_cache=False`), English the defaults.

Start-up cost. The grammars are loaded once per process, on the first line that needs them (so
`fasttts inspect` and `--dry-run` pay only when they count tokens, and the draft voice never). The
English FSTs ship compiled in the WeTextProcessing wheel and are read from there. The Chinese
verbalizer depends on the two options and does not ship, so it is built once (0.7 s) and cached in the
user's cache folder (`$XDG_CACHE_HOME/fasttts/wetext/...`, else `~/.cache/...`), never inside the installed
package (the original writes into its own source tree). The Chinese tagger does not depend on the options:
WeTextProcessing would rebuild it too (143 s, 6.5 GB peak memory, measured), so we start from the one the
wheel ships, which is byte-identical to that build (measured on WeTextProcessing 1.0.4.1 / pynini 2.1.6).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import os
import platform
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fasttts_cli.errors import MissingDependencyError

ZH_OPTIONS = {"remove_interjections": False, "remove_erhua": False}  # front.py's Chinese options
_INSTALL_HINT = (
    "reinstall fasttts-cli, or: pip install 'WeTextProcessing==1.0.4.1' 'pynini==2.1.6' (Linux); "
    "pip install 'wetext==0.1.0' (macOS, Windows)"
)


@dataclass(frozen=True)
class Grammar:
    """The WeTextProcessing step of each route: text -> text with numbers and symbols read out."""

    zh: Callable[[str], str]
    en: Callable[[str], str]


def _same(text: str) -> str:
    return text


IDENTITY = Grammar(_same, _same)  # what the weight-free parity oracles once ran the original with


@dataclass(frozen=True)
class Normalizers:
    """The two loaded normalisers and where they came from (for `doctor`-style reports and tests)."""

    zh: object
    en: object
    backend: str  # "WeTextProcessing x / pynini y" or "wetext x"
    zh_cache: Path | None  # folder of the cached Chinese FSTs (None: wetext, or not cached)


def cache_root() -> Path:
    """The user's cache folder for fasttts (XDG rules), where compiled grammars live."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "fasttts"


@contextlib.contextmanager
def _quiet_logging() -> Iterator[None]:
    """WeTextProcessing logs every FST it reads or builds at INFO level to stderr; not our user's concern."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


def _zh_cache_dir(version: str) -> Path:
    options = "_".join(f"{k}{int(v)}" for k, v in ZH_OPTIONS.items())
    return cache_root() / "wetext" / version.replace(" ", "").replace("/", "_") / f"zh_tn_{options}"


def _build_zh_cache(final: Path) -> None:
    """Build the Chinese FSTs into a private folder, then move it into place in one rename."""
    import tn
    from pynini import Fst
    from tn.chinese.normalizer import Normalizer

    shipped_tagger = Path(tn.__file__).parent / "zh_tn_tagger.fst"

    class _Normalizer(Normalizer):
        def build_tagger(self) -> None:
            if shipped_tagger.is_file():
                self.tagger = Fst.read(str(shipped_tagger))  # the option-free half (module docstring)
            else:
                super().build_tagger()

    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        _Normalizer(cache_dir=str(work), overwrite_cache=True, **ZH_OPTIONS)
        try:
            work.rename(final)
        except OSError:  # another process finished first: its files are the same
            if not (final / "zh_tn_verbalizer.fst").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _backend_name() -> str:
    return f"WeTextProcessing {_version('WeTextProcessing')} / pynini {_version('pynini')}"


def _reference_installed() -> bool:
    """Whether the reference path (WeTextProcessing + pynini, the original's Linux path) is installed.

    pynini has wheels only for x86-64 Linux, so elsewhere (macOS, Windows, Linux on Arm, or a machine that
    cannot take the 155 MB wheel) the original's own fallback, `wetext`, is what a user can have."""
    return _version("WeTextProcessing") != "unknown" and _version("pynini") != "unknown"


def _reference_platform() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def describe() -> tuple[bool, str, str]:
    """(installed, what and where, how to install) from package metadata alone, for `fasttts doctor`."""
    if _reference_installed():
        cache = _zh_cache_dir(_backend_name())
        state = "cached in" if (cache / "zh_tn_verbalizer.fst").is_file() else "compiled on first use into"
        return True, f"{_backend_name()}; Chinese grammar {state} {cache}", ""
    if _version("wetext") != "unknown":
        note = " (not the reference path: install WeTextProcessing + pynini for Linux's readings)"
        return True, f"wetext {_version('wetext')}" + (note if _reference_platform() else ""), ""
    wanted = "WeTextProcessing, pynini" if _reference_platform() else "wetext"
    return False, f"{wanted} not installed (IndexTTS engines need it)", _INSTALL_HINT


def _load_wetextprocessing() -> Normalizers:
    try:
        from tn.chinese.normalizer import Normalizer as NormalizerZh
        from tn.english.normalizer import Normalizer as NormalizerEn
    except ImportError as e:
        raise MissingDependencyError(
            f"WeTextProcessing is not importable ({e}); IndexTTS text normalisation needs it",
            hint=_INSTALL_HINT,
        ) from None
    version = _backend_name()
    cache = _zh_cache_dir(version)
    done = (cache / "zh_tn_tagger.fst").is_file() and (cache / "zh_tn_verbalizer.fst").is_file()
    temporary = None
    if not done:
        try:
            _build_zh_cache(cache)
        except OSError:  # an unwritable cache folder: build for this process only
            temporary = Path(tempfile.mkdtemp(prefix="fasttts-wetext-"))
            cache = temporary / "zh"
            _build_zh_cache(cache)
    zh = NormalizerZh(cache_dir=str(cache), overwrite_cache=False, **ZH_OPTIONS)
    if temporary is not None:  # the FSTs are in memory now
        shutil.rmtree(temporary, ignore_errors=True)
        cache = None
    import tn

    shipped = Path(tn.__file__).parent
    if (shipped / "en_tn_tagger.fst").is_file() and (shipped / "en_tn_verbalizer.fst").is_file():
        en = NormalizerEn(overwrite_cache=False)  # reads the wheel's FSTs, writes nothing
    else:
        en = NormalizerEn(cache_dir=str(_zh_cache_dir(version).parent / "en_tn"), overwrite_cache=False)
    return Normalizers(zh, en, version, cache)


def _load_wetext() -> Normalizers:
    try:
        from wetext import Normalizer
    except ImportError as e:
        raise MissingDependencyError(
            f"wetext is not importable ({e}); IndexTTS text normalisation needs it", hint=_INSTALL_HINT
        ) from None
    zh = Normalizer(remove_erhua=False, lang="zh", operator="tn")  # front.py's call, verbatim
    en = Normalizer(lang="en", operator="tn")
    return Normalizers(zh, en, f"wetext {_version('wetext')}", None)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_lock = threading.Lock()
_loaded: Normalizers | None = None


def normalizers() -> Normalizers:
    """The process's normalisers, loaded on first use (thread-safe; later calls return the same pair)."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                with _quiet_logging():
                    # The reference path where it is installed (Linux x86-64, as the original);
                    # otherwise wetext, as the original does off Linux; neither: exit 3 naming both.
                    use_reference = _reference_installed() or (
                        _reference_platform() and _version("wetext") == "unknown"
                    )
                    _loaded = _load_wetextprocessing() if use_reference else _load_wetext()
    return _loaded


def is_loaded() -> bool:
    """Whether this process has paid for the grammars yet (inspect / --dry-run tests check it)."""
    return _loaded is not None


# A line is normalised when its tokens are counted (planning) and again when it is synthesised; one
# grammar pass costs tens of milliseconds, so the last few thousand results are kept.
@functools.lru_cache(maxsize=4096)
def _zh(text: str) -> str:
    return normalizers().zh.normalize(text)  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=4096)
def _en(text: str) -> str:
    return normalizers().en.normalize(text)  # type: ignore[attr-defined]


WETEXT = Grammar(_zh, _en)  # the default: the original's grammars, loaded lazily
