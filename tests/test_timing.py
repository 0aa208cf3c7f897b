"""Timing solver against hand-computed plans (arithmetic in the comments), plus property checks."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttts_cli.dubbing.timing import (
    LineTiming,
    SlotInput,
    TimingError,
    TimingOptions,
    layout_sequential,
    retime_cues,
    solve_timing,
    summarize,
)
from fasttts_cli.errors import ExitCode, FastTTSError, UsageError

A = pytest.approx
# These hand-computed plans pin the DSP tempo rules (`--fit stretch`); model rendering on top of them is
# tested in test_timing_render.py.
StretchOptions = functools.partial(TimingOptions, fit="stretch")


def slots(*rows: tuple[float, float, float]) -> list[SlotInput]:
    return [SlotInput(index=i + 1, start=s, end=e, duration=d) for i, (s, e, d) in enumerate(rows)]


def test_fits_as_is() -> None:
    out = solve_timing(slots((0.0, 2.0, 1.5), (3.0, 5.0, 1.0)), StretchOptions(), media_end=10.0)
    assert [t.factor for t in out] == [1.0, 1.0]
    assert [(t.start, t.end) for t in out] == [(0.0, 1.5), (3.0, 4.0)]
    assert [t.action for t in out] == ["fit", "fit"]
    assert all(t.shift == 0.0 and t.overflow == 0.0 and not t.truncated for t in out)


def test_borrows_silence_before_speeding_up() -> None:
    # Line 1 may run to 3.0 - 0.08 = 2.92; 2.5 s fits there at its natural tempo.
    out = solve_timing(slots((0.0, 2.0, 2.5), (3.0, 5.0, 1.0)), StretchOptions(), media_end=10.0)
    assert out[0].factor == 1.0
    assert (out[0].start, out[0].end) == (0.0, 2.5)
    assert out[0].action == "borrowed"
    assert out[1].action == "fit"


def test_speed_up_just_enough_and_a_neighbour_that_fits_stays_at_its_pace() -> None:
    # Line 1: room 2.92 s for 3.5 s -> 3.5 / 2.92 = 1.19863; it ends exactly at 2.92.
    # Line 2 fits at 1.0: a neighbour (gap 1 s <= 2 s), but smoothing never speeds up a line that fits.
    out = solve_timing(slots((0.0, 2.0, 3.5), (3.0, 5.0, 1.0)), StretchOptions(), media_end=10.0)
    assert out[0].factor == A(1.1986301)
    assert out[0].end == A(2.92)
    assert out[0].action == "sped-up"
    assert out[1].factor == 1.0 and out[1].action == "fit"


def test_smoothing_evens_out_neighbours_that_both_need_a_speed_up() -> None:
    # Line 1 needs 3.5 / 2.92 = 1.19863; line 2 needs 2.1 / 1.92 = 1.09375, raised to 1.19863 - 0.1.
    out = solve_timing(slots((0.0, 2.0, 3.5), (3.0, 5.0, 2.1)), StretchOptions(), media_end=5.0)
    assert out[0].factor == A(1.1986301)
    assert out[1].factor == A(1.0986301) and out[1].action == "sped-up"


def test_speed_up_capped_overlap_policy() -> None:
    # Line 1: room 2.42 s for 4 s would need 1.653x; capped at 1.25 -> 3.2 s, 0.78 s past 2.42.
    # Line 2 keeps its start (overlap) and fits: it stays at 1.0.
    opts = StretchOptions(overflow="overlap")
    out = solve_timing(slots((0.0, 2.0, 4.0), (2.5, 4.0, 1.0)), opts, media_end=10.0)
    assert out[0].factor == 1.25
    assert (out[0].start, out[0].end) == (0.0, A(3.2))
    assert out[0].overflow == A(0.78)
    assert out[0].action == "overlap"
    assert out[1].start == 2.5 and out[1].shift == 0.0
    assert out[1].factor == 1.0
    assert out[1].action == "fit"


def test_truncate_policy_cuts_at_allowed_end() -> None:
    opts = StretchOptions(overflow="truncate")
    out = solve_timing(slots((0.0, 2.0, 4.0), (2.5, 4.0, 1.0)), opts, media_end=10.0)
    assert out[0].truncated and out[0].action == "truncated"
    assert out[0].factor == 1.25
    assert out[0].end == A(2.42)  # allowed end: 2.5 - 0.08
    assert out[0].overflow == A(0.78)  # 4 / 1.25 = 3.2 s would have ended at 3.2
    assert not out[1].truncated and out[1].start == 2.5


def test_fail_policy_names_every_failing_line() -> None:
    # Line 1 needs 4 / 2.42 = 1.653x; line 3 needs 2 / (4.5 - 3) = 1.333x; line 2 fits.
    opts = StretchOptions(overflow="fail")
    items = slots((0.0, 2.0, 4.0), (2.5, 3.0, 0.3), (3.0, 4.0, 2.0))
    with pytest.raises(TimingError) as ei:
        solve_timing(items, opts, media_end=4.5)
    err = ei.value
    assert isinstance(err, FastTTSError) and err.exit_code == ExitCode.RUNTIME
    assert err.lines == (1, 3)
    msg = str(err)
    assert "line 1 (slot 0.000-2.000 s, natural 4.000 s" in msg and "needs 1.653x" in msg
    assert "line 3 (slot 3.000-4.000 s, natural 2.000 s" in msg and "needs 1.333x" in msg
    assert "line 2 " not in msg
    assert "2 line(s)" in msg


def test_fail_policy_passes_when_everything_fits() -> None:
    out = solve_timing(slots((0.0, 2.0, 2.0), (3.0, 4.0, 0.5)), StretchOptions(overflow="fail"), media_end=5)
    assert [t.action for t in out] == ["fit", "fit"]


def test_shift_ripples_then_repays_from_silence() -> None:
    opts = StretchOptions(max_factor_step=math.inf)  # no smoothing: keep the arithmetic to the shift rule
    items = slots((0.0, 2.0, 3.5), (2.5, 3.0, 0.4), (3.2, 4.0, 0.6), (5.0, 6.0, 0.5))
    out = solve_timing(items, opts)
    # 1: room 2.42 for 3.5 -> capped 1.25 -> 2.8 s, 0.38 past 2.42, pushes line 2.
    assert (out[0].factor, out[0].start, out[0].end) == (1.25, 0.0, A(2.8))
    assert out[0].overflow == A(0.38) and out[0].action == "sped-up"
    # 2: starts 2.8 + 0.08 = 2.88 (shift 0.38); room to 3.12 is 0.24 for 0.4 -> capped 1.25 -> ends 3.2.
    assert (out[1].start, out[1].factor, out[1].end) == (A(2.88), 1.25, A(3.2))
    assert out[1].shift == A(0.38) and out[1].overflow == A(0.08) and out[1].action == "shifted"
    # 3: starts 3.2 + 0.08 = 3.28 (shift 0.08, most of the delay repaid); fits at 1.0 in room to 4.92.
    assert (out[2].start, out[2].factor, out[2].end) == (A(3.28), 1.0, A(3.88))
    assert out[2].shift == A(0.08) and out[2].overflow == 0.0 and out[2].action == "shifted"
    # 4: back on its own slot: delay fully repaid.
    assert (out[3].start, out[3].end, out[3].shift, out[3].action) == (5.0, 5.5, 0.0, "fit")

    s = summarize(out)
    assert s["lines"] == 4
    assert s["actions"]["shifted"] == 2 and s["actions"]["sped-up"] == 1 and s["actions"]["fit"] == 1
    assert s["max_factor"] == 1.25 and s["min_factor"] == 1.0
    assert s["total_shift"] == A(0.46) and s["max_shift"] == A(0.38)
    assert s["overflowing"] == 2 and s["max_overflow"] == A(0.38) and s["truncated"] == 0

    # Subtitles follow the audio; extra display time (slot end + shift) stops at the next cue.
    cues = retime_cues(out)
    assert [c[0] for c in cues] == [1, 2, 3, 4]
    assert cues[0][1:] == (0.0, A(2.8))  # audio end 2.8 > slot end 2.0
    assert cues[1][1:] == (A(2.88), A(3.28))  # slot end 3.0 + 0.38 = 3.38, stopped at next start 3.28
    assert cues[2][1:] == (A(3.28), A(4.08))  # slot end 4.0 + 0.08
    assert cues[3][1:] == (5.0, 6.0)


def test_shifted_line_speeds_up_to_catch_up() -> None:
    # Line 2 would fit at 1.0 from its slot (room 1.0 - 0.08 = 0.92 for 0.8), but it is pushed to 2.88:
    # room 3.42 - 2.88 = 0.54 -> 0.8 / 0.54 = 1.4815 -> capped 1.25 -> ends 3.52.
    opts = StretchOptions(max_factor_step=math.inf)
    out = solve_timing(slots((0.0, 2.0, 3.5), (2.5, 3.2, 0.8), (3.5, 4.0, 0.3)), opts)
    assert out[1].start == A(2.88) and out[1].factor == 1.25 and out[1].end == A(3.52)
    assert out[2].start == A(3.6)  # 3.52 + 0.08


def test_smoothing_envelope() -> None:
    # Line 2 needs exactly 1.775 / (3.0 - 0.08 - 1.5) = 1.25; lines 1, 3 and 4 need a little speed-up
    # (1.2 s in 1.42 s of room: 1.0005), line 5 fits. Step 0.1 around line 2: 1.15, 1.25, 1.15, 1.05;
    # line 5 stays 1.0 (a line that fits is never sped up).
    items = slots(
        (0.0, 1.0, 1.4205), (1.5, 2.5, 1.775), (3.0, 4.0, 1.4205), (4.5, 5.5, 1.4205), (6.0, 7.0, 0.5)
    )
    out = solve_timing(items, StretchOptions(overflow="overlap"), media_end=20.0)
    assert [t.factor for t in out] == [A(1.15), A(1.25), A(1.15), A(1.05), 1.0]
    assert out[1].end == A(2.92) and all(t.overflow == 0.0 for t in out)
    # The chain breaks at a line that fits: line 3 at 1.0 stops the envelope reaching line 4.
    items = slots((0.0, 1.0, 0.5), (1.5, 2.5, 1.775), (3.0, 4.0, 0.5), (4.5, 5.5, 1.4205), (6.0, 7.0, 0.5))
    out = solve_timing(items, StretchOptions(overflow="overlap"), media_end=20.0)
    assert [t.factor for t in out] == [1.0, A(1.25), 1.0, A(1.4205 / 1.42), 1.0]


def test_smoothing_chain_breaks_at_long_pause() -> None:
    # Slots 3 s apart (> smooth_gap 2 s): line 2 stays at 1.0. Line 1: 4.9 / 3.92 = 1.25.
    items = slots((0.0, 1.0, 4.9), (4.0, 5.0, 0.5))
    out = solve_timing(items, StretchOptions(), media_end=10.0)
    assert [t.factor for t in out] == [A(1.25), 1.0]
    out = solve_timing(items, StretchOptions(smooth_gap=5.0), media_end=10.0)
    assert [t.factor for t in out] == [A(1.25), 1.0]  # linked now, but line 2 fits
    items = slots((0.0, 1.0, 4.9), (4.0, 5.0, 5.0))  # line 2 needs 5.0 / 4.92 = 1.01626
    assert [t.factor for t in solve_timing(items, StretchOptions(), media_end=8.92)] == [
        A(1.25),
        A(5.0 / 4.92),
    ]
    out = solve_timing(items, StretchOptions(smooth_gap=5.0), media_end=8.92)
    assert [t.factor for t in out] == [A(1.25), A(1.15)]


def test_slow_down_off_by_default_and_floor_when_on() -> None:
    items = slots((0.0, 2.0, 1.0), (3.0, 5.0, 1.7), (6.0, 8.0, 1.9))
    assert [t.factor for t in solve_timing(items, StretchOptions(), media_end=10.0)] == [1.0, 1.0, 1.0]
    out = solve_timing(items, StretchOptions(max_slowdown=1.25), media_end=10.0)
    # 1: 1.0 s in a 2 s slot -> 0.5, floored at 1 / 1.25 = 0.8 -> ends 1.25.
    # 2: 1.7 < 0.9 * 2 -> 1.7 / 2 = 0.85, but line 3 stays 1.0 (1.9 >= 1.8), so smoothing raises it to 0.9.
    # 1 again: 0.8 is within 0.1 of 0.9, unchanged.
    assert [t.factor for t in out] == [A(0.8), A(0.9), 1.0]
    assert [t.action for t in out] == ["slowed", "slowed", "fit"]
    assert out[0].end == A(1.25) and out[1].end == A(3.0 + 1.7 / 0.9)


def test_empty_and_negative_slots_borrow_like_any_line() -> None:
    items = slots((1.0, 1.0, 0.5), (2.0, 1.5, 0.5), (3.0, 4.0, 0.5))
    out = solve_timing(items, StretchOptions(), media_end=5.0)
    # 1: slot [1, 1], may run to 2.0 - 0.08 = 1.92; 0.5 s fits. 2: [2, 1.5] -> [2, 2], room to 2.92.
    assert [(t.start, t.end, t.factor) for t in out[:2]] == [(1.0, 1.5, 1.0), (2.0, 2.5, 1.0)]
    assert [t.action for t in out[:2]] == ["borrowed", "borrowed"]
    assert "empty slot" in out[0].note and "empty slot" in out[1].note


def test_no_room_line_gets_cap_and_note() -> None:
    # Two cues at the same time (overlapping input): the first has no room at all.
    out = solve_timing(slots((1.0, 2.0, 0.5), (1.0, 2.0, 0.5)), StretchOptions(), media_end=5.0)
    assert out[0].factor == 1.25 and "no room" in out[0].note
    assert out[1].start == A(1.0 + 0.4 + 0.08) and out[1].action == "shifted"


def test_input_order_kept_neighbours_by_time() -> None:
    items = [SlotInput(7, 3.0, 5.0, 2.1), SlotInput(3, 0.0, 2.0, 3.5)]
    out = solve_timing(items, StretchOptions(), media_end=5.0)
    assert [t.index for t in out] == [7, 3]
    assert out[1].factor == A(3.5 / 2.92) and out[0].factor == A(3.5 / 2.92 - 0.1)


def test_untimed_layout_fits_everything() -> None:
    items = layout_sequential([(1, 1.2), (2, 0.8), (3, 2.0)], pause=0.5)
    assert [(i.start, i.end) for i in items] == [(0.0, 1.2), (1.7, A(2.5)), (A(3.0), A(5.0))]
    out = solve_timing(items, StretchOptions())
    assert [t.action for t in out] == ["fit", "fit", "fit"]


def test_last_line_limited_by_media_end_only_when_given() -> None:
    assert solve_timing(slots((0.0, 1.0, 3.0)), StretchOptions())[0].action == "borrowed"
    t = solve_timing(slots((0.0, 1.0, 3.0)), StretchOptions(), media_end=2.0)[0]
    assert t.factor == 1.25 and t.overflow == A(0.4)  # 3 / 1.25 = 2.4 s, ends 0.4 s past 2.0


def test_options_validated_with_flag_names() -> None:
    with pytest.raises(UsageError, match="--overflow"):
        StretchOptions(overflow="squash")
    with pytest.raises(UsageError, match="--max-speedup"):
        StretchOptions(max_speedup=0.9)
    with pytest.raises(UsageError, match="--min-gap"):
        StretchOptions(min_gap=-0.1)
    with pytest.raises(ValueError):
        solve_timing([SlotInput(1, 0.0, 1.0, -1.0)], StretchOptions())
    assert solve_timing([], StretchOptions()) == []


def test_to_json_row() -> None:
    t = solve_timing(slots((0.0, 2.0, 2.5)), StretchOptions(), media_end=3.0)[0]
    row = t.to_json()
    assert row["slot"] == [0.0, 2.0] and row["natural"] == 2.5 and row["action"] == "borrowed"


# ---------------------------------------------------------------- properties over random inputs


@st.composite
def problems(draw):
    n = draw(st.integers(1, 12))
    t = 0.0
    rows = []
    for _ in range(n):
        t += draw(st.floats(0.0, 3.0))
        length = draw(st.floats(-0.5, 4.0))
        dur = draw(st.floats(0.0, 8.0))
        rows.append((round(t, 3), round(t + length, 3), round(dur, 3)))
    opts = StretchOptions(
        max_speedup=draw(st.floats(1.0, 2.0)),
        max_slowdown=draw(st.sampled_from([1.0, 1.1, 1.25])),
        min_gap=draw(st.floats(0.0, 0.3)),
        max_factor_step=draw(st.floats(0.0, 0.5)),
        overflow=draw(st.sampled_from(["shift", "overlap", "truncate"])),
    )
    media_end = draw(st.one_of(st.none(), st.floats(0.0, 60.0)))
    return slots(*rows), opts, media_end


def _allowed(items: list[SlotInput], opts: TimingOptions, media_end: float | None) -> dict[int, float]:
    order = sorted(items, key=lambda it: it.start)
    lim = math.inf if media_end is None else media_end
    out = {}
    for k, it in enumerate(order):
        nxt = order[k + 1].start - opts.min_gap if k + 1 < len(order) else math.inf
        out[it.index] = min(nxt, lim)
    return out


@settings(max_examples=300, deadline=None)
@given(problems())
def test_properties(problem) -> None:
    items, opts, media_end = problem
    out = solve_timing(items, opts, media_end=media_end)
    allowed = _allowed(items, opts, media_end)
    by_time = sorted(zip(items, out, strict=True), key=lambda p: p[0].start)
    floor = 1.0 / opts.max_slowdown
    for it, t in by_time:
        assert isinstance(t, LineTiming) and t.index == it.index
        assert floor - 1e-9 <= t.factor <= opts.max_speedup + 1e-12  # caps never exceeded
        assert t.start >= it.start - 1e-12  # never earlier than the slot
        if t.truncated:
            assert opts.overflow == "truncate" and t.end == A(max(t.start, allowed[it.index]))
        else:
            assert t.end - t.start == A(it.duration / t.factor, abs=1e-9)
            if t.overflow == 0.0:
                assert t.end <= allowed[it.index] + 1e-6
        if opts.overflow != "shift":
            assert t.start == it.start
    for (a, ta), (b, tb) in itertools.pairwise(by_time):
        if b.start - max(a.end, a.start) <= opts.smooth_gap and min(ta.factor, tb.factor) > 1.0:
            assert abs(ta.factor - tb.factor) <= opts.max_factor_step + 1e-9  # smoothing rule
        if opts.overflow == "shift":
            assert tb.start >= ta.end + opts.min_gap - 1e-9  # min_gap always kept
    # Smoothing never creates or enlarges an overflow: compare with smoothing switched off.
    plain = solve_timing(
        items,
        StretchOptions(
            max_speedup=opts.max_speedup,
            max_slowdown=opts.max_slowdown,
            min_gap=opts.min_gap,
            max_factor_step=math.inf,
            overflow=opts.overflow,
        ),
        media_end=media_end,
    )
    for t, p in zip(out, plain, strict=True):
        assert t.overflow <= p.overflow + 1e-9
        assert t.factor >= p.factor - 1e-9 or opts.overflow == "shift"
        # A line that fits without smoothing is never sped up by it.
        assert t.factor <= 1.0 + 1e-12 or p.factor > 1.0
