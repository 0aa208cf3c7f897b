"""--separate's engine room: a random-weight htdemucs of the real architecture, written in the published
layout and loaded through demucs' own loader; block-by-block separation against one pass of Demucs over the
whole file; stems as long as the source; the stems cache (a second run never loads the model); a separation
killed mid-way resumes without recomputing its finished blocks; the model folder's errors (exit 3 naming
`fasttts download --separation`); the download itself from a file:// mirror."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("demucs", reason="the `separate` extra (demucs) is not installed")
import torch

from fasttts_cli.cli.commands import main
from fasttts_cli.errors import MissingDependencyError, UsageError
from fasttts_cli.separation import model as sepmodel
from fasttts_cli.separation import stems as sepstems
from fasttts_cli.separation.blocks import plan_blocks, weight

SR = 48000
SECONDS = 6.0
STRIDES = 2  # blocks of 2 strides (1.5 s for the small model): four blocks over six seconds
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the test machines share their cores, and oversubscribed OpenMP threads spin."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> sepmodel.ModelFiles:
    return sepmodel.build_random(tmp_path_factory.mktemp("htdemucs-small"), small=True)


def _source(path: Path, seconds: float = SECONDS, channels: int = 2) -> Path:
    """A tone over noise, different in each channel."""
    t = np.arange(int(seconds * SR)) / SR
    rng = np.random.default_rng(1)
    x = np.stack([0.2 * np.sin(2 * np.pi * (220 + 30 * c) * t) for c in range(channels)])
    x += 0.05 * rng.standard_normal(x.shape)
    sf.write(path, x.T.astype(np.float32), SR, subtype="FLOAT")
    return path


def _one_pass(files: sepmodel.ModelFiles, source: Path) -> tuple[np.ndarray, np.ndarray]:
    """Demucs over the whole file at once, as its own CLI would (no shifts)."""
    from demucs.apply import apply_model

    from fasttts_cli.audio.load import AudioReader

    model = sepmodel.load(files, "cpu")
    with AudioReader(source, model.samplerate) as r:
        x = r.read(1 << 30)
    with torch.no_grad():
        out = apply_model(model, torch.from_numpy(x)[None], shifts=0, split=True, overlap=0.25)[0].numpy()
    voc = list(model.sources).index("vocals")
    return out[voc], out.sum(axis=0) - out[voc]


def _read(path: Path) -> np.ndarray:
    x, _ = sf.read(path, dtype="float32", always_2d=True)
    return x.T


@pytest.fixture(scope="module")
def separated(small_model, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("sep")
    source = _source(d / "src.wav")
    before = torch.get_num_threads()  # module fixtures run before the function-scoped one_thread
    torch.set_num_threads(1)
    try:
        stems = sepstems.separate(source, d / "stems", small_model, strides=STRIDES)
        ref = _one_pass(small_model, source)
    finally:
        torch.set_num_threads(before)
    return {"source": source, "root": d / "stems", "stems": stems, "ref": ref}


def test_the_real_htdemucs_architecture_loads_through_demucs_loader(tmp_path):
    """The published hyper-parameters, random weights, saved as demucs saves them: its loader rebuilds the
    model (a bag of one, as htdemucs.yaml makes it) with the published parameter count."""
    files = sepmodel.build_random(tmp_path / "full")
    assert files.name == "htdemucs" and len(files.weights) == 1
    assert (tmp_path / "full" / "htdemucs.yaml").read_text().startswith("models: [")
    model = sepmodel.load(files, "cpu")
    (member,) = model.models
    assert type(member).__name__ == "HTDemucs" and list(model.sources) == ["drums", "bass", "other", "vocals"]
    assert sum(p.numel() for p in member.parameters()) == 41_984_456
    assert sepmodel.segment_seconds(model) == pytest.approx(7.8) and model.samplerate == 44100


def test_block_by_block_equals_one_pass(separated):
    """Blocks on Demucs' own segment grid: equal to one pass everywhere to 24-bit rounding (the stems are
    24-bit FLAC); the tolerance is stated at 1e-6 of full scale, 1e-5 inside the cross-fades."""
    stems = separated["stems"]
    ref_dialogue, ref_background = separated["ref"]
    dialogue, background = _read(stems.dialogue), _read(stems.background)
    assert dialogue.shape == ref_dialogue.shape == background.shape
    plan = plan_blocks(44100, 0.25, strides=STRIDES, fade=22050)
    n = dialogue.shape[1]
    assert plan.count(n) == 4  # the test covers three inner boundaries
    edges = np.zeros(n, bool)
    for k in range(1, plan.count(n)):
        s = k * plan.block
        edges[s - plan.fade : s + plan.fade] = True
    for got, ref in ((dialogue, ref_dialogue), (background, ref_background)):
        assert np.abs(ref).max() > 1e-3  # the random model does put something in each stem
        err = np.abs(got - ref)
        assert err[:, ~edges].max() < 1e-6
        assert err[:, edges].max() < 1e-5


def test_stems_are_as_long_as_the_source(separated):
    stems = separated["stems"]
    n = round(SECONDS * 44100)
    for p in (stems.dialogue, stems.background):
        info = sf.info(str(p))
        assert info.samplerate == 44100 and info.channels == 2 and info.frames == n
    assert stems.seconds == pytest.approx(SECONDS, abs=1e-4)
    assert stems.computed == 4 and stems.reused == 0 and not stems.cached
    assert not (stems.folder / "blocks").exists()  # the block files are gone once the stems are written


def test_the_cache_is_reused_without_the_model(separated, small_model, monkeypatch, tmp_path):
    def no_model(*a, **k):
        raise AssertionError("the model was loaded for stems that are cached")

    monkeypatch.setattr(sepstems, "load", no_model)
    again = sepstems.separate(separated["source"], separated["root"], small_model, strides=STRIDES)
    assert again.cached and again.dialogue == separated["stems"].dialogue
    # The same content under another name (another dub of the same video) finds the same stems.
    copy = tmp_path / "renamed.wav"
    shutil.copy(separated["source"], copy)
    assert sepstems.separate(copy, separated["root"], small_model, strides=STRIDES).folder == again.folder
    # Another model is another key: a different folder, and here the model would be needed.
    other = sepmodel.build_random(tmp_path / "other", small=True, seed=1)
    with pytest.raises(AssertionError, match="model was loaded"):
        sepstems.separate(separated["source"], separated["root"], other, strides=STRIDES)


_KILLED = """
import sys
from pathlib import Path
from fasttts_cli.separation.model import locate
from fasttts_cli.separation.stems import separate
separate(Path(sys.argv[1]), Path(sys.argv[2]), locate(Path(sys.argv[3])), strides=int(sys.argv[4]),
         progress=lambda k, n: print(k, n, flush=True))
"""


def test_a_killed_separation_resumes_where_it_was(separated, small_model, tmp_path, monkeypatch):
    root = tmp_path / "stems"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-c", _KILLED, separated["source"], root, small_model.folder, str(STRIDES)]
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stdout.readline()  # block 1 is on disk when its progress is printed
        assert first.split()[0] == "1", first
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    folder = next(p for p in root.iterdir() if p.is_dir())
    assert not (folder / "stems.json").exists()
    done_before = sorted(p.name for p in (folder / "blocks").glob("*.npy"))
    assert done_before and "00000.npy" in done_before and len(done_before) < 4

    calls = []
    real = sepstems._Run._separate

    def counting(self, x):
        calls.append(x.shape[1])
        return real(self, x)

    monkeypatch.setattr(sepstems._Run, "_separate", counting)
    stems = sepstems.separate(separated["source"], root, small_model, strides=STRIDES)
    assert stems.reused == len(done_before) and stems.computed == 4 - len(done_before) == len(calls)
    for got, ref in zip((stems.dialogue, stems.background), separated["ref"], strict=True):
        assert np.abs(_read(got) - ref).max() < 1e-5  # the resumed result is the uninterrupted one


def test_cross_fade_weights_sum_to_one():
    plan = plan_blocks(1000, 0.25, strides=4, fade=100)  # block 3000, context 1500
    n = 10_500
    total = np.zeros(n)
    for k in range(plan.count(n)):
        a, b = plan.stored(k, n)
        total[a:b] += weight(plan, k, n, a, b)
    assert np.allclose(total, 1.0)
    assert plan.context % plan.stride == 0 and plan.context >= 1000 + plan.fade


def test_a_missing_model_is_exit_3_naming_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(sepmodel.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(MissingDependencyError, match="no folder") as ei:
        sepmodel.locate()
    assert "fasttts download --separation" in str(ei.value)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "htdemucs.yaml").write_text("models: ['955717e8']\n")
    with pytest.raises(MissingDependencyError, match=r"no 955717e8-\*\.th"):
        sepmodel.locate(tmp_path / "m")
    with pytest.raises(UsageError, match="a file"):
        sepmodel.locate(tmp_path / "m" / "htdemucs.yaml")

    samples = REPO / "samples"
    voices = [
        f"--voice=ALICE={samples / 'voices' / 'alice.wav'}",
        f"--voice=BOB={samples / 'voices' / 'bob.wav'}",
    ]
    dub = ["dub", samples / "demo.tsv", *voices, "--video", samples / "demo.mp4", "--separate"]
    cast = ["cast", samples / "demo.mp4", samples / "demo.srt", "--separate"]
    for argv in ([*dub, "--output-dir", tmp_path / "out"], cast):
        with pytest.raises(SystemExit) as ei:
            main([*map(str, argv), "--json"])
        out = json.loads(capsys.readouterr().out)
        assert ei.value.code == 3, out
        assert "fasttts download --separation" in json.dumps(out)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.flac"))


def test_download_from_a_mirror_then_present(small_model, tmp_path, monkeypatch):
    """The fetch path end to end from a file:// mirror holding the random weights under the published
    name (the expected checksum is the random file's for this test); a corrupt file is discarded."""
    from fasttts_cli.separation import fetch

    weights = small_model.weights[0]
    sig, digest = weights.stem.split("-")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(weights, mirror / weights.name)
    monkeypatch.setattr(fetch, "WEIGHTS", weights.name)
    monkeypatch.setattr(fetch, "CHECKSUM", digest)
    monkeypatch.setattr(fetch, "SIGNATURE", sig)
    monkeypatch.setenv(sepmodel.URL_ENV, mirror.as_uri())
    r = fetch.fetch_separation(tmp_path / "model")
    assert r.action == "fetched" and (tmp_path / "model" / weights.name).read_bytes() == weights.read_bytes()
    assert sepmodel.locate(tmp_path / "model").weights[0].name == weights.name
    assert fetch.fetch_separation(tmp_path / "model").action == "present"
    (mirror / weights.name).write_bytes(b"not the weights")
    with pytest.raises(MissingDependencyError, match="discarded"):
        fetch.fetch_separation(tmp_path / "again")
    assert not list((tmp_path / "again").glob("*.th"))


def test_the_acceptance_section_runs_on_the_cpu(tmp_path):
    """tools/accept_separation.py as `accept_torch --sim-cpu` runs it (small config, 3 s)."""
    from fasttts_cli.tools.accept_separation import run_separation
    from fasttts_cli.tools.acceptance_table import Table

    table = Table("accept_torch")
    run_separation(table, torch.device("cpu"), "sim", tmp_path)
    assert [c.name for c in table.checks] == [
        "separation model (htdemucs, random weights)",
        "separation 3 s on cpu",
        "separation blocks == one pass",
    ]
    assert all(c.ok for c in table.checks), table.checks
    assert "per minute of audio" in table.checks[1].detail
