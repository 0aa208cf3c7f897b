"""`fasttts download`: exactly the files inference reads from each repository, assembled into the official
layout that `build --checkpoint DIR` reads; resumable; a clear exit 3 without the `download` extra.
huggingface_hub is replaced by a fake that serves the five repositories from the tiny checkpoint and
writes a real cache layout (tests/hf_hub_fake.py); nothing touches the network."""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fasttts_cli.app.download import auxiliary_files, download_release, main_files
from fasttts_cli.cli.commands import main
from fasttts_cli.nets.release_layout import MAIN_REPO, default_hub, find_layout, repo_folder
from tests.hf_hub_fake import MAIN_FILES, REV, hub_add, release_sources
from tests.parity import CACHE

hf = pytest.importorskip("huggingface_hub")
torch = pytest.importorskip("torch")

from fasttts_cli.build.tiny import ensure_tiny_checkpoint  # noqa: E402
from fasttts_cli.nets.checkpoint import CheckpointPaths, checkpoint_digest, load_checkpoint  # noqa: E402
from fasttts_cli.nets.config import load_config  # noqa: E402

EXPECTED = {
    MAIN_REPO: set(MAIN_FILES),
    "facebook/w2v-bert-2.0": {"config.json", "model.safetensors"},
    "amphion/MaskGCT": {"semantic_codec/model.safetensors"},
    "funasr/campplus": {"campplus_cn_common.bin"},
    "nvidia/bigvgan_v2_22khz_80band_256x": {"config.json", "bigvgan_generator.pt"},
}
LAYOUT = {
    *MAIN_FILES,
    "hf_cache/w2v-bert-2.0/config.json",
    "hf_cache/w2v-bert-2.0/model.safetensors",
    "hf_cache/semantic_codec_model.safetensors",
    "hf_cache/campplus_cn_common.bin",
    "hf_cache/bigvgan/config.json",
    "hf_cache/bigvgan/bigvgan_generator.pt",
}


@pytest.fixture(scope="module")
def tiny() -> Path:
    return ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0)


class FakeHub:
    """hf_hub_download / snapshot_download over local sources, into a real cache layout."""

    def __init__(self, sources: dict[str, dict[str, Path]]) -> None:
        self.sources = sources
        self.calls: list[tuple[str, str]] = []
        self.fail: set[tuple[str, str]] = set()

    def hf_hub_download(
        self, repo_id: str, filename: str, *, cache_dir: Any = None, revision: Any = None, **kw
    ):
        self.calls.append((repo_id, filename))
        if (repo_id, filename) in self.fail:
            raise ConnectionError("Connection reset by peer")
        hub = Path(cache_dir) if cache_dir else default_hub()
        return str(hub_add(hub, repo_id, filename, self.sources[repo_id][filename]))

    def snapshot_download(self, repo_id: str, *, allow_patterns: Any = None, cache_dir: Any = None, **kw):
        hub = Path(cache_dir) if cache_dir else default_hub()
        for name, src in self.sources[repo_id].items():
            if any(fnmatch.fnmatch(name, p) for p in allow_patterns or ["*"]):
                self.calls.append((repo_id, name))
                hub_add(hub, repo_id, name, src)
        return str(hub / repo_folder(repo_id) / "snapshots" / REV)


@pytest.fixture
def fake(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    f = FakeHub(release_sources(tiny, tmp_path / "extras"))
    monkeypatch.setattr(hf, "hf_hub_download", f.hf_hub_download)
    monkeypatch.setattr(hf, "snapshot_download", f.snapshot_download)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return f


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def _requested(calls: list[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for repo, name in calls:
        out.setdefault(repo, set()).add(name)
    return out


def test_the_file_list_of_each_repository_is_exact(tiny: Path) -> None:
    cfg = load_config(tiny / "config.yaml").raw
    got = _requested([(f.repo, f.filename) for f in main_files(cfg) + auxiliary_files()])
    assert got == EXPECTED
    assert {f.target for f in main_files(cfg) + auxiliary_files()} == LAYOUT


def test_download_assembles_the_official_layout_that_builds(
    fake: FakeHub, tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "IndexTTS-2"
    with pytest.raises(SystemExit) as e:
        main(["download", str(dest), "--json"])
    r = json.loads(capsys.readouterr().out)
    assert e.value.code == 0 and r["ok"] and r["fetched"] == len(LAYOUT) and r["present"] == 0
    assert _requested(fake.calls) == EXPECTED  # no README, no Qwen, no other codec, no preprocessor
    assert _files(dest) == LAYOUT
    # hard links into the cache's blobs when they share a file system: no second copy on disk
    assert (dest / "gpt.pth").stat().st_nlink >= 2 and {f["action"] for f in r["files"]} == {"linked"}
    assert find_layout(dest).kind == "official"
    want = checkpoint_digest(CheckpointPaths(tiny).resolve(load_config(tiny / "config.yaml")))
    assert load_checkpoint(dest).digest() == want


def test_a_second_run_downloads_nothing_and_a_partial_one_resumes(fake: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "ckpt"
    download_release(dest, progress_bars=False)
    fake.calls.clear()
    again = download_release(dest, progress_bars=False)
    assert fake.calls == [] and {f["action"] for f in again.files} == {"present"}
    (dest / "hf_cache" / "campplus_cn_common.bin").unlink()
    (dest / "feat2.pt").unlink()
    third = download_release(dest, progress_bars=False)
    assert sorted(fake.calls) == sorted(
        [("funasr/campplus", "campplus_cn_common.bin"), (MAIN_REPO, "feat2.pt")]
    )
    assert sum(f["action"] != "present" for f in third.files) == 2 and _files(dest) == LAYOUT


def test_an_interrupted_download_leaves_no_file_that_looks_complete(fake: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "ckpt"
    fake.fail.add(("nvidia/bigvgan_v2_22khz_80band_256x", "bigvgan_generator.pt"))
    from fasttts_cli.errors import FastTTSError

    with pytest.raises(FastTTSError) as e:
        download_release(dest, progress_bars=False)
    assert e.value.exit_code == 1
    assert "bigvgan_generator.pt from nvidia/bigvgan_v2_22khz_80band_256x" in str(e.value)
    assert "run the same command again" in str(e.value)
    assert not (dest / "hf_cache" / "bigvgan" / "bigvgan_generator.pt").exists()
    assert not [p for p in dest.rglob(".*partial*")]
    fake.fail.clear()
    fake.calls.clear()
    download_release(dest, progress_bars=False)
    assert fake.calls == [("nvidia/bigvgan_v2_22khz_80band_256x", "bigvgan_generator.pt")]


def test_qwen_only_when_asked(fake: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "ckpt"
    download_release(dest, with_qwen=True, progress_bars=False)
    assert _files(dest) == LAYOUT | {"qwen0.6bemo4-merge/config.json", "qwen0.6bemo4-merge/model.safetensors"}
    assert (MAIN_REPO, "README.md") not in fake.calls


def test_without_the_extra_it_is_exit_3_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(SystemExit) as e:
        main(["download", str(tmp_path / "d"), "--json"])
    r = json.loads(capsys.readouterr().out)
    assert e.value.code == 3 and r["exit_code"] == 3
    assert "download" in r["error"] and "pip install 'fasttts-cli[download]'" in r["hint"]
    assert not (tmp_path / "d").exists()


def test_an_unknown_model_is_a_usage_error(fake: FakeHub, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["download", str(tmp_path / "d"), "--model", "indextts9", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert e.value.code == 2 and "--model" in r["error"]


def test_offline_with_an_empty_cache_names_the_file_in_a_fresh_process(tmp_path: Path) -> None:
    import os
    import subprocess

    # the real huggingface_hub, no fake: offline and nothing cached is a runtime failure (exit 1)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    cmd = [sys.executable, "-m", "fasttts_cli", "download", str(tmp_path / "d"), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    r = json.loads(p.stdout)
    assert p.returncode == 1 and r["exit_code"] == 1, p.stderr
    assert "config.yaml from IndexTeam/IndexTTS-2" in r["error"] and "Traceback" not in p.stderr
