"""--lang against the languages the engine's model speaks (exit 2 naming both), and the lines carry it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.errors import ExitCode, UsageError
from fasttts_cli.synth.languages import spoken_language
from tests.test_pipeline import FakeSynth, make_job


class Speaks(FakeSynth):
    def __init__(self, languages: tuple[str, ...], needs: bool = False) -> None:
        super().__init__()
        self.languages = languages
        self.needs_language = needs


@pytest.mark.parametrize(
    "given,want", [("eng", "en"), ("en", "en"), ("en-US", "en"), ("zho", "zh"), ("chi", "zh")]
)
def test_the_forms_of_lang_map_to_the_models_codes(given: str, want: str) -> None:
    assert spoken_language(Speaks(("zh", "en")), given) == want


def test_und_leaves_it_to_an_engine_that_can_tell() -> None:
    assert spoken_language(Speaks(("zh", "en")), "und") is None


def test_a_language_the_model_cannot_speak_is_exit_2_naming_both() -> None:
    with pytest.raises(UsageError) as e:
        spoken_language(Speaks(("zh", "en")), "spa")
    assert e.value.exit_code == ExitCode.USAGE
    assert "--lang spa" in e.value.message and "zh, en" in e.value.message


def test_an_engine_that_must_be_told_refuses_und_with_a_hint() -> None:
    with pytest.raises(UsageError, match="needs to be told the language") as e:
        spoken_language(Speaks(("zh", "en", "ja", "es", "ar"), needs=True), "und")
    assert "--lang" in (e.value.hint or "")
    assert spoken_language(Speaks(("zh", "en", "ja", "es", "ar"), needs=True), "ja") == "ja"


def test_an_engine_that_lists_nothing_speaks_what_it_is_given() -> None:
    assert spoken_language(FakeSynth(), "fra") == "fr"


def test_dub_refuses_before_synthesis_and_lines_carry_the_language(tmp_path: Path) -> None:
    fake = Speaks(("en",))
    with pytest.raises(UsageError, match="--lang spa"):
        run_dub(replace(make_job(tmp_path), lang="spa"), synthesizer=fake)
    assert fake.calls == []
    ok = Speaks(("en",))
    res = run_dub(make_job(tmp_path), synthesizer=ok)
    assert res.ok and {r.lang for call in ok.calls for r in call} == {"en"}
    # The language is part of each line's key: the same job under `und` is synthesized again.
    again = Speaks(("en",))
    run_dub(replace(make_job(tmp_path), lang="und"), synthesizer=again)
    assert sum(len(c) for c in again.calls) == 3 and {r.lang for c in again.calls for r in c} == {None}
