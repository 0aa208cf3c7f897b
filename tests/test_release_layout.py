"""Checkpoint resolution in every layout of the public release, offline, from the tiny checkpoint:
the Hugging Face cache (snapshot, models-- folder, hub), a plain release folder with the auxiliary models
in the user's hub, the original's own hf_cache/ cache; missing files named all at once with their source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fasttts_cli.errors import MissingDependencyError
from fasttts_cli.nets.release_layout import (
    AUX_MODELS,
    MAIN_REPO,
    default_hub,
    find_layout,
    repo_folder,
    snapshot,
)
from tests.hf_hub_fake import MAIN_FILES, REV, hub_add, release_sources, write_hub
from tests.parity import CACHE

torch = pytest.importorskip("torch")

from fasttts_cli.build.tiny import ensure_tiny_checkpoint  # noqa: E402
from fasttts_cli.nets.checkpoint import (  # noqa: E402
    CheckpointPaths,
    checkpoint_digest,
    load_checkpoint,
    locate_checkpoint,
)
from fasttts_cli.nets.config import load_config  # noqa: E402


@pytest.fixture(scope="module")
def tiny() -> Path:
    return ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0)


@pytest.fixture(scope="module")
def tiny_digest(tiny: Path) -> str:
    return checkpoint_digest(CheckpointPaths(tiny).resolve(load_config(tiny / "config.yaml")))


@pytest.fixture
def sources(tiny: Path, tmp_path: Path) -> dict[str, dict[str, Path]]:
    return release_sources(tiny, tmp_path / "extras")


@pytest.fixture(autouse=True)
def _user_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hub = tmp_path / "user-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub


def _digest(folder: Path) -> str:
    return load_checkpoint(folder).digest()


def test_hub_layouts_resolve_to_the_same_files(
    sources: dict[str, dict[str, Path]], tmp_path: Path, tiny_digest: str
) -> None:
    hub = write_hub(tmp_path / "hub", sources)
    repo = hub / repo_folder(MAIN_REPO)
    snap = repo / "snapshots" / REV
    assert (snap / "gpt.pth").is_symlink()
    for given, kind in ((snap, "snapshot"), (repo, "repo"), (hub, "hub")):
        layout = find_layout(given)
        assert layout.kind == kind and layout.root == snap and layout.hubs[0] == hub
        located = locate_checkpoint(CheckpointPaths(given))
        assert located.root == snap
        assert located.codec == hub / repo_folder("amphion/MaskGCT") / "snapshots" / REV / (
            "semantic_codec/model.safetensors"
        )
    # same bytes as the official tiny folder, found through symlinks into blobs/
    assert _digest(hub) == tiny_digest


def test_release_folder_with_auxiliary_models_in_the_user_hub(
    sources: dict[str, dict[str, Path]], tmp_path: Path, _user_hub: Path, tiny_digest: str
) -> None:
    release = tmp_path / "IndexTTS-2"
    release.mkdir()
    for name in MAIN_FILES:
        shutil.copy(sources[MAIN_REPO][name], release / name)
    aux = {r: f for r, f in sources.items() if r != MAIN_REPO}
    write_hub(_user_hub, aux)
    assert find_layout(release).kind == "release"
    assert _digest(release) == tiny_digest


def test_hf_home_and_xdg_are_honoured(tmp_path: Path) -> None:
    assert default_hub({"HF_HUB_CACHE": str(tmp_path / "a")}) == tmp_path / "a"
    assert default_hub({"HF_HOME": str(tmp_path / "h")}) == tmp_path / "h" / "hub"
    assert default_hub({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "huggingface" / "hub"
    env = {"HF_HUB_CACHE": str(tmp_path / "a"), "HF_HOME": str(tmp_path / "h")}
    assert default_hub(env) == tmp_path / "a"


def test_the_originals_own_cache_under_hf_cache(
    sources: dict[str, dict[str, Path]], tmp_path: Path, tiny_digest: str
) -> None:
    # infer_v2.py sets HF_HUB_CACHE=./checkpoints/hf_cache: the auxiliary models sit there as a hub
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    for name in MAIN_FILES:
        shutil.copy(sources[MAIN_REPO][name], ckpt / name)
    write_hub(ckpt / "hf_cache", {r: f for r, f in sources.items() if r != MAIN_REPO})
    assert _digest(ckpt) == tiny_digest


def test_refs_main_picks_the_revision_else_a_complete_snapshot(tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_text("x")
    hub = tmp_path / "hub"
    hub_add(hub, "funasr/campplus", "campplus_cn_common.bin", src, rev="old")
    hub_add(hub, "funasr/campplus", "README.md", src, rev="new")  # refs/main -> new, without the model
    repo = hub / repo_folder("funasr/campplus")
    assert (repo / "refs" / "main").read_text() == "new"
    assert snapshot(repo, ("README.md",)) == repo / "snapshots" / "new"
    assert snapshot(repo, ("campplus_cn_common.bin",)) == repo / "snapshots" / "old"
    assert snapshot(repo, ("nothing.bin",)) is None


def test_missing_files_are_named_at_once_with_their_source(
    sources: dict[str, dict[str, Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skip = (
        (MAIN_REPO, "feat1.pt"),
        ("funasr/campplus", "campplus_cn_common.bin"),
        ("nvidia/bigvgan_v2_22khz_80band_256x", "bigvgan_generator.pt"),
    )
    hub = write_hub(tmp_path / "hub", sources, skip=skip)
    with pytest.raises(MissingDependencyError) as e:
        load_checkpoint(hub)
    msg = str(e.value)
    assert "3 model files missing" in msg
    assert "feat1.pt (from IndexTeam/IndexTTS-2)" in msg
    assert "campplus_cn_common.bin (from funasr/campplus)" in msg
    assert "bigvgan_generator.pt (from nvidia/bigvgan_v2_22khz_80band_256x)" in msg
    assert "fasttts download" in msg and "--campplus" in msg and "--bigvgan" in msg

    from fasttts_cli.cli.commands import main

    with pytest.raises(SystemExit) as ex:
        main(["build", "--checkpoint", str(hub), "--out", str(tmp_path / "e"), "--json"])
    r = json.loads(capsys.readouterr().out)
    assert ex.value.code == 3 and r["exit_code"] == 3 and "3 model files missing" in r["error"]
    assert "fasttts download" in r["hint"] and not (tmp_path / "e").exists()


def test_a_release_folder_without_config_names_it_and_the_missing_models(tmp_path: Path) -> None:
    with pytest.raises(MissingDependencyError) as e:
        load_checkpoint(tmp_path)
    msg = str(e.value)
    assert "config.yaml (from IndexTeam/IndexTTS-2)" in msg
    n_aux = sum(len(m.files) for m in AUX_MODELS)
    assert f"{1 + n_aux} model files missing" in msg


def test_a_repo_folder_without_snapshot_is_exit_3(tmp_path: Path) -> None:
    repo = tmp_path / repo_folder(MAIN_REPO)
    (repo / "snapshots").mkdir(parents=True)
    with pytest.raises(MissingDependencyError) as e:
        find_layout(repo)
    assert "fasttts download" in str(e.value)


def test_resolution_imports_no_huggingface_hub(sources: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    hub = write_hub(tmp_path / "hub", sources)
    code = (
        "import sys; sys.modules['huggingface_hub'] = None\n"
        "from fasttts_cli.nets.checkpoint import CheckpointPaths, locate_checkpoint\n"
        f"p = locate_checkpoint(CheckpointPaths({str(hub)!r}))\n"
        "print(p.root.name, p.campplus.name)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == [REV, "campplus_cn_common.bin"]


@pytest.mark.slow
def test_build_from_a_hub_folder_with_no_other_flags(
    sources: dict[str, dict[str, Path]],
    tmp_path: Path,
    tiny_digest: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import fasttts_cli.synth.engine_select as es
    from fasttts_cli.cli.commands import main
    from fasttts_cli.spec.engine_folder import read_manifest

    hub = write_hub(tmp_path / "hub", sources)
    monkeypatch.setattr(es, "engines_root", lambda: tmp_path / "engines")
    torch.set_num_threads(1)
    with pytest.raises(SystemExit) as ex:
        main(["build", "--checkpoint", str(hub), "--json"])
    r = json.loads(capsys.readouterr().out)
    assert ex.value.code == 0, r
    assert Path(r["engine"]) == tmp_path / "engines" / "IndexTTS-2-cpu-fp32"
    m = read_manifest(Path(r["engine"]))
    assert m.checkpoint_digest == tiny_digest and m.random_weights is True
