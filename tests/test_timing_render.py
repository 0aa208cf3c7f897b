"""Model rendering in the timing solver: the total factor split into the engine's render and DSP tempo."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttts_cli.dubbing.timing import SlotInput, TimingOptions, solve_timing, split_factor, summarize
from fasttts_cli.errors import UsageError

FPS = 22050 / 256  # IndexTTS-2's render frames per second
A = pytest.approx


def slots(*rows: tuple[float, float, float]) -> list[SlotInput]:
    return [SlotInput(index=i + 1, start=s, end=e, duration=d) for i, (s, e, d) in enumerate(rows)]


def test_a_line_that_fits_keeps_its_natural_audio() -> None:
    (t,) = solve_timing(slots((0.0, 2.0, 1.5)), media_end=10.0, frame_rate=FPS)
    assert (t.frames, t.render_factor, t.stretch_factor, t.target) == (None, 1.0, 1.0, 1.5)
    assert t.duration == A(1.5)


def test_inside_the_render_bounds_the_model_does_it_all() -> None:
    # Room 2.92 s (next slot 3.0 minus the 0.08 s gap) for 3.3 s: 1.130x, inside 1.25.
    a, _ = solve_timing(slots((0.0, 2.0, 3.3), (3.0, 5.0, 1.0)), media_end=10.0, frame_rate=FPS)
    assert a.stretch_factor == 1.0
    assert a.frames == math.floor(3.3 / (3.3 / 2.92) * FPS + 1e-9)
    assert a.target == a.frames / FPS
    assert a.duration == A(a.target, abs=1e-9)
    assert a.target <= 2.92 + 1e-9  # rounded down: never longer than planned
    assert a.render_factor == A(3.3 / 2.92, rel=5e-3)  # whole frames: within 1/86 s
    assert a.action == "sped-up" and a.overflow == 0.0


def test_beyond_the_render_bound_dsp_takes_the_rest() -> None:
    # Needs 4.0 / 2.92 = 1.370x: the model renders 1.25x, the DSP 1.370 / 1.25 (about 1.096x).
    a, _ = solve_timing(slots((0.0, 2.0, 4.0), (3.0, 5.0, 1.0)), media_end=10.0, frame_rate=FPS)
    assert a.render_factor == A(1.25, rel=5e-3)
    assert a.stretch_factor == A((4.0 / 2.92) * a.target / 4.0 * 1.0, rel=1e-9)
    assert a.duration == A(2.92)
    assert a.factor == A(4.0 / 2.92)


def test_the_total_cap_is_both_caps_together() -> None:
    # No room at all: the cap 1.25 * 1.25 = 1.5625, split 1.25 model, 1.25 DSP.
    opts = TimingOptions(overflow="overlap")
    a, _ = solve_timing(slots((0.0, 2.0, 4.0), (2.1, 4.0, 1.0)), opts, media_end=10.0, frame_rate=FPS)
    assert a.factor == A(
        1.5625, rel=5e-3
    )  # within a frame: the DSP cap holds, the line may end a frame later
    assert a.render_factor == A(1.25, rel=5e-3)
    assert a.stretch_factor == A(1.25, rel=5e-3)


def test_stretch_mode_is_dsp_only() -> None:
    opts = TimingOptions(fit="stretch")
    a, _ = solve_timing(slots((0.0, 2.0, 3.3), (3.0, 5.0, 1.0)), opts, media_end=10.0, frame_rate=FPS)
    assert (a.frames, a.render_factor) == (None, 1.0)
    assert a.stretch_factor == a.factor == A(3.3 / 2.92)
    assert a.target == 3.3


def test_slow_down_renders_first_when_it_is_on() -> None:
    opts = TimingOptions(max_slowdown=1.25)
    (t,) = solve_timing(slots((0.0, 4.0, 3.0)), opts, media_end=10.0, frame_rate=FPS)
    # 3.0 s in a 4.0 s slot: 0.75x wanted; the model slows 1/1.25 = 0.8x, the DSP 0.75 / 0.8.
    assert t.render_factor == A(0.8, rel=5e-3)
    assert t.stretch_factor == A(0.75 / t.render_factor, rel=1e-6)
    assert t.duration == A(4.0)


def test_bad_render_caps_name_their_flags() -> None:
    with pytest.raises(UsageError, match="--max-render-speedup"):
        TimingOptions(max_render_speedup=0.9)
    with pytest.raises(UsageError, match="--max-render-slowdown"):
        TimingOptions(max_render_slowdown=math.nan)
    with pytest.raises(UsageError, match="--fit"):
        TimingOptions(fit="squash")


def test_summary_counts_the_split() -> None:
    out = solve_timing(
        # fits; needs 3.2 / 2.92 (model only); needs 3.0 / 1.92 (model 1.25 and DSP); fits
        slots((0.0, 2.0, 1.0), (10.0, 12.0, 3.2), (13.0, 14.0, 3.0), (15.0, 16.0, 0.5)),
        TimingOptions(max_factor_step=math.inf),  # no smoothing: each line's own need
        media_end=30.0,
        frame_rate=FPS,
    )
    s = summarize(out)
    assert s["rendered_to_fit"] == 2 and s["stretched"] == 1
    assert s["max_stretch"] == A(max(t.stretch_factor for t in out), abs=1e-4)


def test_split_without_frames_is_continuous() -> None:
    sp = split_factor(2.0, 1.1, TimingOptions(), None)
    assert sp.frames is None and sp.target == A(2.0 / 1.1) and sp.stretch_factor == 1.0


times = st.floats(0.0, 30.0, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(times, st.floats(0.0, 6.0), st.floats(0.05, 8.0)), min_size=1, max_size=12),
    overflow=st.sampled_from(["shift", "overlap", "truncate"]),
    step=st.sampled_from([0.1, math.inf]),
)
def test_model_split_properties(rows: list[tuple[float, float, float]], overflow: str, step: float) -> None:
    items = slots(*[(s, s + w, d) for s, w, d in rows])
    opts = TimingOptions(overflow=overflow, max_factor_step=step)
    model = solve_timing(items, opts, media_end=40.0, frame_rate=FPS)
    plain = solve_timing(
        items, TimingOptions(overflow=overflow, fit="stretch", max_factor_step=step), media_end=40.0
    )
    for t, p in zip(model, plain, strict=True):
        if p.factor == 1.0 and p.stretch_factor == 1.0 and t.factor <= 1.0 + 1e-9:
            assert t.frames is None and t.target == t.natural  # a line that fits is untouched
        if t.frames is not None:
            assert t.target == A(t.frames / FPS)
            assert t.target == A(t.natural / t.render_factor)
            assert 1 / 1.25 - 1e-9 <= t.render_factor <= 1.25 + 1e-9
        if 1 / 1.25 + 1e-6 < t.factor < 1.25 - 1e-6:  # a total inside the render bounds: no DSP at all
            assert t.stretch_factor == 1.0
        assert (
            1 / opts.max_slowdown - 1e-9 <= t.stretch_factor <= opts.max_speedup + 1e-9
        )  # the DSP cap holds
        if not t.truncated:
            assert t.duration == A(t.target / t.stretch_factor, abs=1e-9)
