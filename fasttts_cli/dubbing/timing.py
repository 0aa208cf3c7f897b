"""Fit each synthesized line into its subtitle slot: borrow silence, render it faster or slower in the model,
change tempo within caps, then apply the overflow policy. Pure arithmetic on times; no audio is touched here
(the engine renders, tempo.py does the DSP).

Terms (all in seconds, lines taken in time order of slot start, ties by input order):

- slot ``[s, e]``: the cue's times. A slot with ``e <= s`` (empty or negative) is treated as ``[s, s]``: the
  line still starts at ``s`` and may borrow the silence after it like any other line (note "empty slot").
- natural duration ``d``: the synthesized audio's length before any tempo change.
- allowed end ``A``: where the line's audio must have ended: the next line's slot start minus ``min_gap``;
  for the last line ``media_end`` (no limit when ``media_end`` is None). ``media_end`` also caps every ``A``.
  ``A`` may fall inside the slot (cues that touch or overlap); it is not widened to ``e``, because the
  next line's start is what the viewer hears. Silence after ``e`` up to ``A`` is "borrowed" before any
  speed-up is used.
- factor ``f`` (> 1 = faster): placed duration is ``d / f``.

The rule, step by step:

1. Needed factor: ``n = d / (A - t)`` where ``t`` is the line's start (its slot start, or later in shift
   mode, see 4). The line gets ``max(1, min(n, max_speedup))``: no speed-up while it fits by borrowing, never
   above the cap. A line with no room at all (``A <= t``) gets the cap.
2. Slow-down (off by default: ``max_slowdown == 1``): a line that starts exactly at its slot start and whose
   natural duration is below ``slow_threshold`` (default 0.9) of its usable slot ``min(e, A) - s`` is
   slowed to fill that slot, no further than ``1 / max_slowdown``:
   ``f = max(1 / max_slowdown, d / (min(e, A) - s))``.
   Lines that nearly fill their slot are left alone: a few percent of tempo change costs more in artefacts
   than it gains. Slow-down never borrows silence past ``e``.
3. Smoothing: two lines are neighbours when they are consecutive in time and the silence between their
   slots (``s_next - max(e, s)``) is at most ``smooth_gap`` (default 2 s; a longer pause resets the pace, as
   a scene change would). Smoothing evens out the pace of lines that need a speed-up themselves: for
   every neighbour pair of such lines the final factors satisfy ``|f_i - f_j| <= max_factor_step``.
   It only ever RAISES a factor, to ``f_j - max_factor_step`` of its faster neighbour; the result is the
   smallest such raise of the step 1-2 factors (the upper envelope ``max_j (f_j - step * |i - j|)`` over
   each chain of neighbours). A line that fits (step 1 gave it 1.0, or slow-down less) is never sped up
   by smoothing: a tempo change costs more in artefacts than an even pace gains, so it is raised at most
   to 1.0 (a slowed line next to a sped-up one is un-slowed: the step rule wins over slow-down), and a
   chain of neighbours is broken at it. Because every factor before smoothing is ``<= max_speedup``, the
   envelope never exceeds the cap; because factors only go up, every line becomes shorter or stays, so
   smoothing can never create or enlarge an overflow.
4. Placement and overflow (``overflow`` option), what is left after 1-3:
   - ``shift`` (default): a line starts at ``max(s, previous placed end + min_gap)``, so ``min_gap`` always
     holds and no line starts before its slot. A line that overruns its ``A`` pushes the following lines
     later; each pushed line computes its needed factor from its pushed start (so it uses speed-up, within
     the cap, to catch up), and the delay is repaid by the silence after later lines: as soon as a gap is
     long enough, the next line starts on its own slot again. (Smoothing's forward half is applied while
     placing; its backward half can only shorten lines, which moves later starts earlier, never later.)
   - ``overlap``: every line starts at ``s``; an overrun simply plays over the next line.
   - ``truncate``: every line starts at ``s``; audio past ``A`` is cut (``truncated``; placed end = ``A``).
   - ``fail``: every line starts at ``s``; if any line overruns, raise TimingError naming ALL of them.

``overflow`` in a LineTiming is how far the tempo-changed audio, at its placed start, runs past ``A``
(in truncate mode: the part that was cut). ``action`` is the strongest thing done to the line, in this
order: truncated > overlap > shifted > sped-up > slowed > borrowed > fit. In shift mode the line that
overruns keeps its own action (usually "sped-up", with overflow > 0) and the lines it pushes are "shifted".

Model rendering (``fit = "model"``, the default): the solver runs on natural durations before any audio is
rendered, and splits each line's total factor ``f`` (steps 1-4, with the speed-up cap
``max_render_speedup * max_speedup`` and, when slow-down is on, the slow-down cap
``max_render_slowdown * max_slowdown``) into a *render* factor ``r``, ``f`` clamped to
``[1 / max_render_slowdown, max_render_speedup]``, which the engine realises by rendering the line to a
target of ``d / r`` seconds, and a DSP *stretch* for what is left, ``f / r``. The target is whole render
frames (``frame_rate`` per second), rounded down so a line is never longer than planned (up, by one frame,
where rounding down would pass ``max_render_speedup``): a line inside the render bounds is placed at
exactly its target, with ``stretch_factor == 1``. A line that fits has ``r == 1`` and keeps its natural
audio (``frames`` None). ``fit = "stretch"``: every line is rendered at its natural
length and ``f`` is all DSP tempo, capped by ``max_speedup`` alone (the behaviour before model rendering).

Untimed input (plain text): there are no slots to fit; lay the lines out from their natural durations with
``layout_sequential`` (after synthesis) and every line comes out "fit".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fasttts_cli.errors import ExitCode, FastTTSError, UsageError

OVERFLOW_POLICIES = ("shift", "overlap", "truncate", "fail")
FIT_MODES = ("model", "stretch")
ACTIONS = ("fit", "borrowed", "sped-up", "slowed", "shifted", "overlap", "truncated")

# Time tolerance: below a microsecond is float noise, not an overrun or a shift.
EPS = 1e-6


class TimingError(FastTTSError):
    """Lines that cannot fit under --overflow fail; the message names every one of them."""

    exit_code = ExitCode.RUNTIME

    def __init__(self, message: str, *, lines: Sequence[int] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.lines = tuple(lines)


@dataclass(frozen=True)
class TimingOptions:
    max_speedup: float = 1.25
    max_slowdown: float = 1.0  # 1.0 = never slow down; 1.25 allows factor down to 0.8
    min_gap: float = 0.08
    max_factor_step: float = 0.1
    overflow: str = "shift"  # shift | overlap | truncate | fail
    # Additions beyond the shared interface (defaults keep the documented behaviour):
    slow_threshold: float = 0.9  # slow down only lines shorter than this share of their slot
    smooth_gap: float = 2.0  # lines further apart than this are not neighbours for smoothing
    fit: str = "model"  # model: the engine renders to a target first; stretch: DSP tempo only
    max_render_speedup: float = 1.25  # the most the model speaks a line faster than its natural pace
    max_render_slowdown: float = 1.25  # ... and slower (used only when slow-down is on: max_slowdown > 1)

    def __post_init__(self) -> None:
        # Values come straight from CLI flags, so the messages name the flags.
        if not (math.isfinite(self.max_speedup) and self.max_speedup >= 1.0):
            raise UsageError(f"--max-speedup must be a number >= 1.0 (got {self.max_speedup})")
        if not (math.isfinite(self.max_slowdown) and self.max_slowdown >= 1.0):
            raise UsageError(f"--max-slowdown must be a number >= 1.0 (got {self.max_slowdown})")
        if not (math.isfinite(self.min_gap) and self.min_gap >= 0.0):
            raise UsageError(f"--min-gap must be >= 0 seconds (got {self.min_gap})")
        if math.isnan(self.max_factor_step) or self.max_factor_step < 0.0:
            raise UsageError(f"--max-factor-step must be >= 0 (got {self.max_factor_step})")
        if self.overflow not in OVERFLOW_POLICIES:
            raise UsageError(
                f"--overflow must be one of {', '.join(OVERFLOW_POLICIES)} (got {self.overflow!r})"
            )
        if self.fit not in FIT_MODES:
            raise UsageError(f"--fit must be one of {', '.join(FIT_MODES)} (got {self.fit!r})")
        for flag, v in (
            ("--max-render-speedup", self.max_render_speedup),
            ("--max-render-slowdown", self.max_render_slowdown),
        ):
            if not (math.isfinite(v) and v >= 1.0):
                raise UsageError(f"{flag} must be a number >= 1.0 (got {v})")
        if not (0.0 <= self.slow_threshold <= 1.0):
            raise UsageError(f"slow_threshold must be within 0..1 (got {self.slow_threshold})")
        if math.isnan(self.smooth_gap) or self.smooth_gap < 0.0:
            raise UsageError(f"smooth_gap must be >= 0 seconds (got {self.smooth_gap})")

    @property
    def model(self) -> bool:
        return self.fit == "model"

    @property
    def speedup_cap(self) -> float:
        """The largest total factor: render and DSP together."""
        return self.max_speedup * (self.max_render_speedup if self.model else 1.0)

    @property
    def slowdown_cap(self) -> float:
        return self.max_slowdown * (self.max_render_slowdown if self.model else 1.0)


@dataclass(frozen=True)
class SlotInput:
    index: int
    start: float
    end: float
    duration: float  # natural audio duration, before tempo change


@dataclass(frozen=True)
class LineTiming:
    index: int
    slot_start: float
    slot_end: float
    natural: float
    factor: float  # > 1 = faster
    start: float  # placed, after tempo change
    end: float
    shift: float  # start - slot_start
    overflow: float  # seconds past the allowed end (cut off, when truncated)
    truncated: bool
    action: str
    note: str = ""  # why something unusual happened (empty slot, no room before the next cue)
    target: float | None = None  # rendered duration, seconds (natural when not rendered to a length)
    render_factor: float = 1.0  # natural / target: what the model does
    stretch_factor: float = 1.0  # DSP tempo on the rendered audio (> 1 = faster)
    frames: int | None = None  # render target in frames; None: the natural length

    @property
    def duration(self) -> float:
        """The placed duration (after any cut)."""
        return self.end - self.start

    def to_json(self) -> dict:
        return {
            "target": round(self.natural if self.target is None else self.target, 4),
            "render_factor": round(self.render_factor, 4),
            "stretch_factor": round(self.stretch_factor, 4),
            "frames": self.frames,
            "duration": round(self.duration, 4),
            "index": self.index,
            "slot": [round(self.slot_start, 4), round(self.slot_end, 4)],
            "natural": round(self.natural, 4),
            "factor": round(self.factor, 4),
            "start": round(self.start, 4),
            "end": round(self.end, 4),
            "shift": round(self.shift, 4),
            "overflow": round(self.overflow, 4),
            "truncated": self.truncated,
            "action": self.action,
            "note": self.note,
        }


def _check_item(it: SlotInput) -> None:
    for name in ("start", "end", "duration"):
        v = getattr(it, name)
        if not math.isfinite(v):
            raise ValueError(f"line {it.index}: {name} is not a finite number ({v})")
    if it.duration < 0:
        raise ValueError(f"line {it.index}: negative duration {it.duration}")


def _needed(d: float, start: float, allowed: float) -> float:
    if d <= 0.0:
        return 0.0
    room = allowed - start
    return math.inf if room <= EPS else d / room


def _smoothed(target: float, sped: bool) -> float:
    """How far smoothing may raise a line toward `target`: all the way for a line that needs a speed-up
    itself, at most to 1.0 (un-slowing it) for one that fits: a line that fits is never sped up."""
    return target if sped else min(target, 1.0)


@dataclass(frozen=True)
class Split:
    """A total factor as the engine's render and the DSP tempo after it."""

    render_factor: float
    frames: int | None  # None: the natural length
    target: float  # rendered duration, seconds
    stretch_factor: float

    @property
    def placed(self) -> float:
        return self.target / self.stretch_factor


def split_factor(d: float, f: float, opts: TimingOptions, frame_rate: float | None) -> Split:
    """Split the total factor `f` of a line of natural duration `d` (see the module docstring)."""
    if not opts.model or d <= 0.0:
        return Split(1.0, None, d, f)
    r = min(max(f, 1.0 / opts.max_render_slowdown), opts.max_render_speedup)
    if abs(r - 1.0) <= 1e-9:
        return Split(1.0, None, d, f)
    target = d / r
    frames = None
    if frame_rate is not None:
        frames = max(1, math.floor(target * frame_rate + 1e-9))
        if d * frame_rate / frames > opts.max_render_speedup + 1e-9:
            frames += 1  # a short line: rounding down would push the model past its bound
        target = frames / frame_rate
    if abs(f - r) <= 1e-9:
        return Split(d / target, frames, target, 1.0)
    # Whole frames move the render off its bound by up to a frame; the DSP part keeps its own cap and the
    # line lands up to that frame later than planned rather than played faster than --max-speedup.
    stretch = min(max(target * f / d, 1.0 / opts.max_slowdown), opts.max_speedup)
    return Split(d / target, frames, target, stretch)


def solve_timing(
    items: Sequence[SlotInput],
    opts: TimingOptions = TimingOptions(),
    *,
    media_end: float | None = None,
    frame_rate: float | None = None,
) -> list[LineTiming]:
    """Plan every line's factor and placement; returns one LineTiming per item, in the input order.
    `frame_rate`: the engine's render frames per second (sample rate / hop); model targets are whole
    frames of it."""
    for it in items:
        _check_item(it)
    n = len(items)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda k: (items[k].start, k))
    lines = [items[k] for k in order]
    s = [it.start for it in lines]
    e = [max(it.end, it.start) for it in lines]  # empty/negative slots become [s, s]
    d = [it.duration for it in lines]

    limit = math.inf if media_end is None else float(media_end)
    allowed = [min(s[i + 1] - opts.min_gap, limit) for i in range(n - 1)] + [limit]
    linked = [s[i + 1] - e[i] <= opts.smooth_gap for i in range(n - 1)]  # i and i+1 are neighbours
    step = opts.max_factor_step
    shift_mode = opts.overflow == "shift"

    # Pass 1 (forward): needed factor from the actual start, cap, optional slow-down, forward smoothing.
    f = [1.0] * n
    sped = [False] * n  # the line itself needs a speed-up (before smoothing)
    prev_end = -math.inf
    for i in range(n):
        start = max(s[i], prev_end + opts.min_gap) if shift_mode else s[i]
        need = _needed(d[i], start, allowed[i])
        fi = max(1.0, min(need, opts.speedup_cap))
        if opts.max_slowdown > 1.0 and need < 1.0 and start <= s[i] + EPS and d[i] > 0.0:
            target = min(e[i], allowed[i]) - s[i]
            if target > EPS and d[i] < opts.slow_threshold * target:
                fi = max(1.0 / opts.slowdown_cap, d[i] / target)
        sped[i] = fi > 1.0
        if i > 0 and linked[i - 1]:
            fi = max(fi, _smoothed(f[i - 1] - step, sped[i]))
        f[i] = fi
        prev_end = start + d[i] / fi

    # Pass 2 (backward): raise a line toward a faster line after it; never lowers, never passes the cap.
    for i in range(n - 2, -1, -1):
        if linked[i]:
            f[i] = max(f[i], _smoothed(f[i + 1] - step, sped[i]))

    # Pass 3: placement with the final factors, then the overflow policy.
    out: list[LineTiming | None] = [None] * n
    failures: list[str] = []
    failed_idx: list[int] = []
    prev_end = -math.inf
    for i in range(n):
        it = lines[i]
        start = max(s[i], prev_end + opts.min_gap) if shift_mode else s[i]
        sp = split_factor(d[i], f[i], opts, frame_rate)
        end = start + sp.placed
        over = max(0.0, end - allowed[i])
        over = over if over > EPS else 0.0
        truncated = False
        notes = []
        if it.end <= it.start:
            notes.append("empty slot (end <= start)")
        if allowed[i] - s[i] <= EPS:
            notes.append(f"no room: the next cue starts at {allowed[i] + opts.min_gap:.3f} s")
        if over and opts.overflow == "truncate":
            end = max(start, allowed[i])
            truncated = True
        if over and opts.overflow == "fail":
            need = _needed(d[i], s[i], allowed[i])
            need_txt = "no room" if math.isinf(need) else f"needs {need:.3f}x"
            failures.append(
                f"line {it.index} (slot {it.start:.3f}-{it.end:.3f} s, natural {d[i]:.3f} s, "
                f"must end by {allowed[i]:.3f} s): {need_txt}"
            )
            failed_idx.append(it.index)
        shift = start - s[i]
        if truncated:
            action = "truncated"
        elif over and opts.overflow == "overlap":
            action = "overlap"
        elif shift > EPS:
            action = "shifted"
        elif f[i] > 1.0 + 1e-9:
            action = "sped-up"
        elif f[i] < 1.0 - 1e-9:
            action = "slowed"
        elif end > e[i] + EPS:
            action = "borrowed"
        else:
            action = "fit"
        out[order[i]] = LineTiming(
            index=it.index,
            slot_start=it.start,
            slot_end=it.end,
            natural=d[i],
            factor=d[i] / sp.placed if sp.placed > 0.0 else f[i],
            start=start,
            end=end,
            shift=shift,
            overflow=over,
            truncated=truncated,
            action=action,
            note="; ".join(notes),
            target=sp.target,
            render_factor=sp.render_factor,
            stretch_factor=sp.stretch_factor,
            frames=sp.frames,
        )
        prev_end = end

    if failures:
        raise TimingError(
            f"{len(failures)} line(s) do not fit even at the {opts.speedup_cap:g}x speed-up cap "
            f"(--overflow fail): " + "; ".join(failures),
            lines=failed_idx,
            hint="raise --max-speedup (or --max-render-speedup), shorten the text, or use --overflow "
            "shift|overlap|truncate",
        )
    return [t for t in out if t is not None]


def summarize(timings: Sequence[LineTiming]) -> dict:
    """Report totals: counts per action, factor range, shifts and overflows."""
    actions = {a: 0 for a in ACTIONS}
    for t in timings:
        actions[t.action] = actions.get(t.action, 0) + 1
    factors = [t.factor for t in timings] or [1.0]
    shifts = [t.shift for t in timings] or [0.0]
    overs = [t.overflow for t in timings] or [0.0]
    return {
        "lines": len(timings),
        "actions": actions,
        "max_factor": round(max(factors), 4),
        "min_factor": round(min(factors), 4),
        "total_shift": round(sum(shifts), 4),
        "max_shift": round(max(shifts), 4),
        "overflowing": sum(1 for t in timings if t.overflow > 0.0),
        "max_overflow": round(max(overs), 4),
        "truncated": sum(1 for t in timings if t.truncated),
        "end": round(max((t.end for t in timings), default=0.0), 4),
        "rendered_to_fit": sum(1 for t in timings if abs(t.render_factor - 1.0) > 1e-9),
        "stretched": sum(1 for t in timings if abs(t.stretch_factor - 1.0) > 1e-9),
        "max_stretch": round(max((t.stretch_factor for t in timings), default=1.0), 4),
        "max_render_factor": round(max((t.render_factor for t in timings), default=1.0), 4),
    }


def retime_cues(timings: Sequence[LineTiming]) -> list[tuple[int, float, float]]:
    """(index, start, end) per line, in time order, for subtitles that match the dub.

    A cue starts where its audio starts; it stays up at least as long as its audio and as long as its
    original slot (moved by the line's shift), but that extra display time stops at the next cue's start.
    """
    ts = sorted(timings, key=lambda t: (t.start, t.index))
    out = []
    for k, t in enumerate(ts):
        keep = max(t.slot_end, t.slot_start) + t.shift
        if k + 1 < len(ts):
            keep = min(keep, ts[k + 1].start)
        out.append((t.index, t.start, max(t.end, keep)))
    return out


def layout_sequential(
    durations: Sequence[tuple[int, float]], *, start: float = 0.0, pause: float = 0.5
) -> list[SlotInput]:
    """Slots for untimed lines: one after another, each exactly its natural duration, `pause` apart.

    Use it after synthesis, when durations are known; with `pause >= min_gap` every line then fits as-is.
    """
    out = []
    t = start
    for index, dur in durations:
        out.append(SlotInput(index=index, start=t, end=t + dur, duration=dur))
        t += dur + pause
    return out
