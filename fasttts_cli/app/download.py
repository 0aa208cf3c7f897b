"""`fasttts download DIR`: the public IndexTTS-2 release, assembled into the official layout.

Exactly the files inference reads, from five repositories (release_layout.py names them and why):
config.yaml and the files it names from `IndexTeam/IndexTTS-2`, and the four auxiliary models into
`DIR/hf_cache/` under the names the loader expects (`semantic_codec/model.safetensors` of amphion/MaskGCT
becomes `hf_cache/semantic_codec_model.safetensors`). The Qwen emotion model (`qwen0.6bemo4-merge/`,
only used to turn emotion *text* into a vector, which fasttts does not do) only with `with_qwen`.

Files come through huggingface_hub's cache (`hf_hub_download`: resumable, with its own progress bars,
offline with HF_HUB_OFFLINE=1 once cached) and are hard-linked into DIR when the cache is on the same
file system, copied otherwise. Each lands under a temporary name and is renamed when complete, so a file
present in DIR is whole: a second run skips it and asks the network nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.errors import FastTTSError, InputError, MissingDependencyError, UsageError
from fasttts_cli.nets.release_layout import AUX_MODELS, MAIN_REPO
from fasttts_cli.partials import partial_path

MODELS = ("indextts2",)
INSTALL_HINT = "pip install 'fasttts-cli[download]'  (or: pip install 'huggingface_hub>=0.24')"
# config.yaml keys naming the other files of the main repository (dataset.bpe_model is nested)
MAIN_FILE_KEYS = ("gpt_checkpoint", "s2mel_checkpoint", "w2v_stat", "emo_matrix", "spk_matrix")


@dataclass(frozen=True)
class RepoFile:
    repo: str
    filename: str  # path inside the repository
    target: str  # path inside DIR


@dataclass
class DownloadResult:
    folder: Path
    files: list[dict[str, Any]] = field(default_factory=list)  # repo, file, path, action, bytes

    def to_json(self) -> dict[str, Any]:
        fetched = [f for f in self.files if f["action"] != "present"]
        return {
            "ok": True,
            "command": "download",
            "checkpoint": str(self.folder),
            "files": self.files,
            "fetched": len(fetched),
            "present": len(self.files) - len(fetched),
            "bytes": sum(int(f["bytes"]) for f in self.files),
        }


def main_files(config: dict[str, Any]) -> list[RepoFile]:
    """The files of IndexTeam/IndexTTS-2 that inference reads, as config.yaml names them."""
    names = ["config.yaml"]
    for key in MAIN_FILE_KEYS:
        names.append(_name(config, key, config.get(key)))
    dataset = config.get("dataset")
    names.append(
        _name(config, "dataset.bpe_model", dataset.get("bpe_model") if isinstance(dataset, dict) else None)
    )
    return [RepoFile(MAIN_REPO, n, n) for n in names]


def _name(config: dict[str, Any], key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in Path(value).parts:
        raise InputError(f"{MAIN_REPO}/config.yaml", f"key {key} = {value!r} is not a file of the release")
    return value


def auxiliary_files() -> list[RepoFile]:
    """The files of the four auxiliary models, with their places under hf_cache/ in the official layout."""
    out = []
    for m in AUX_MODELS:
        for f, rel in zip(m.files, m.official_files(), strict=True):
            out.append(RepoFile(m.repo, f, f"hf_cache/{rel}"))
    return out


def qwen_folder(config: dict[str, Any]) -> str:
    q = config.get("qwen_emo_path") or "qwen0.6bemo4-merge/"
    return _name(config, "qwen_emo_path", str(q)).rstrip("/")


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise MissingDependencyError(
            "fasttts download needs huggingface_hub (the `download` extra)", hint=INSTALL_HINT
        ) from None
    return huggingface_hub


def download_release(
    dest: Path | str,
    *,
    model: str = "indextts2",
    with_qwen: bool = False,
    cache_dir: Path | str | None = None,
    revision: str | None = None,
    progress: Callable[[str], None] | None = None,
    progress_bars: bool = True,
) -> DownloadResult:
    """Fetch the release into `dest` (see the module docstring); returns what was fetched or present."""
    say = progress or (lambda _msg: None)
    if model not in MODELS:
        raise UsageError(f"--model {model!r}: unknown", hint=f"choose from {', '.join(MODELS)}")
    hub = _hub()
    if not progress_bars:
        from huggingface_hub.utils import disable_progress_bars  # a lazy submodule: import it by name

        disable_progress_bars()
    dest = Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: exists and is not a folder", hint="give a new or existing folder")
    made = _made_dirs(dest)
    try:
        # huggingface_hub logs every retry of a failing request on stderr ("Retrying in 1s [Retry 1/5]"):
        # the error below says it once, naming the file.
        with _hub_logs_quiet():
            return _fetch(hub, dest, with_qwen, cache_dir, revision, say, made)
    except BaseException:
        _remove_if_empty(made)  # folders this run made and left empty; never a file, never one it found
        raise


def _fetch(
    hub: Any,
    dest: Path,
    with_qwen: bool,
    cache_dir: Path | str | None,
    revision: str | None,
    say: Callable[[str], None],
    made: list[Path],
) -> DownloadResult:
    result = DownloadResult(dest)
    cache = str(cache_dir) if cache_dir is not None else None
    offline: list[str] = []  # why the Hub cannot be reached, once asked (then: the cache only)

    def get(f: RepoFile) -> Path:
        target = dest / f.target
        if target.is_file():
            result.files.append(_row(f, target, "present"))
            return target
        if not offline:
            offline.append(hub_unreachable(hub) or "")
        say(f"{f.repo}: {f.filename}")
        rev = revision if f.repo == MAIN_REPO else None
        only_cache = {"local_files_only": True} if offline[0] else {}
        try:
            cached = hub.hf_hub_download(
                f.repo, filename=f.filename, cache_dir=cache, revision=rev, **only_cache
            )
        except Exception as e:  # network, auth, offline miss: one line naming the file
            why = (
                f"no network ({offline[0]}) and not in the cache"
                if offline[0]
                else (f"{type(e).__name__}: {_first_line(e)}")
            )
            raise FastTTSError(
                f"could not download {f.filename} from {f.repo}: {why}",
                hint="check the network (or HF_HUB_OFFLINE / HF_TOKEN) and run the same command again: "
                "finished files are kept and a partial one resumes",
            ) from None
        made.extend(_made_dirs(target.parent))
        action = _place(Path(cached), target)
        result.files.append(_row(f, target, action))
        return target

    config_path = get(RepoFile(MAIN_REPO, "config.yaml", "config.yaml"))
    config = _read_config(config_path)
    for f in main_files(config)[1:] + auxiliary_files():
        get(f)
    if with_qwen:
        folder = qwen_folder(config)
        say(f"{MAIN_REPO}: {folder}/ (Qwen emotion model)")
        try:
            snap = Path(
                hub.snapshot_download(
                    MAIN_REPO, allow_patterns=[f"{folder}/*"], cache_dir=cache, revision=revision
                )
            )
        except Exception as e:
            raise FastTTSError(
                f"could not download {folder}/ from {MAIN_REPO}: {type(e).__name__}: {_first_line(e)}",
                hint="run the same command again: finished files are kept",
            ) from None
        for src in sorted((snap / folder).rglob("*")):
            if src.is_file():
                rel = src.relative_to(snap).as_posix()
                target = dest / rel
                made.extend(_made_dirs(target.parent))
                action = "present" if target.is_file() else _place(src, target)
                result.files.append(_row(RepoFile(MAIN_REPO, rel, rel), target, action))
    return result


def hub_unreachable(hub: Any, timeout: float = 5.0) -> str | None:
    """Why the Hub's endpoint cannot be reached (None: it answers, or the way there is not ours to test:
    HF_HUB_OFFLINE, which huggingface_hub honours itself, or a proxy). huggingface_hub would retry each
    request for about 25 s before trying its cache; knowing first, the cache is read at once."""
    from urllib.parse import urlparse

    proxies = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0") or any(map(os.environ.get, proxies)):
        return None
    url = urlparse(str(getattr(getattr(hub, "constants", None), "ENDPOINT", "https://huggingface.co")))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return f"{host} unreachable: {e.strerror or type(e).__name__}"
    return None


@contextlib.contextmanager
def _hub_logs_quiet() -> Any:
    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _made_dirs(folder: Path) -> list[Path]:
    """Make `folder` (and its missing parents); the ones this call made, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_if_empty(made: list[Path]) -> None:
    for d in sorted(set(made), key=lambda p: len(p.parts), reverse=True):  # deepest first
        with contextlib.suppress(OSError):
            d.rmdir()  # only an empty folder goes


def _read_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise InputError(path, f"unreadable config.yaml: {_first_line(e)}") from None
    if not isinstance(data, dict):
        raise InputError(path, "config.yaml is not a mapping")
    return data


def _place(cached: Path, target: Path) -> str:
    """Hard-link (same file system) or copy a cached file to `target`, complete or not at all."""
    src = cached.resolve()  # snapshots/<rev>/<file> is a symlink into blobs/
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(target)  # the one partial-name scheme: unique per run, swept after a kill
    try:
        try:
            os.link(src, tmp)
            action = "linked"
        except OSError:
            shutil.copyfile(src, tmp)
            action = "copied"
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return action


def _row(f: RepoFile, target: Path, action: str) -> dict[str, Any]:
    return {
        "repo": f.repo,
        "file": f.filename,
        "path": str(target),
        "action": action,
        "bytes": target.stat().st_size,
    }


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
