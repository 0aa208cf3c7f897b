"""`GET /metrics`: counters, gauges and histograms in Prometheus' text format (no client library needed).

Names (all prefixed `fasttts_`): `queue_depth` and `in_flight` (gauges), `requests_total` (answered with
audio), `errors_total` (answered with an error by the engine side), `rejected_total` (429: queue full),
`cancelled_total` (the client left), `voices_prepared_total`, and the histograms `first_audio_seconds`
(request received -> first audio out of the engine) and `rtf` (a batch's wall time / a line's seconds).
"""

from __future__ import annotations

import threading
from collections import defaultdict

BUCKETS = {
    "first_audio_seconds": (0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    "rtf": (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
}
HELP = {
    "queue_depth": "requests waiting for the engine",
    "in_flight": "requests the engine is working on",
    "requests_total": "speech requests answered with audio",
    "errors_total": "speech requests that failed (bad voice or input found late, a failing line)",
    "rejected_total": "speech requests refused with 429 (queue full)",
    "cancelled_total": "speech requests whose client left before the end",
    "voices_prepared_total": "voice conditionings computed (then kept per voice)",
    "first_audio_seconds": "time from a request's arrival to its first audio",
    "rtf": "engine wall time per second of audio",
}


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, float] = defaultdict(float)
        self._gauges: dict[str, float] = {"queue_depth": 0.0, "in_flight": 0.0}
        self._hist: dict[str, list[float]] = {k: [0.0] * (len(b) + 2) for k, b in BUCKETS.items()}

    def count(self, name: str, by: float = 1.0) -> None:
        with self._lock:
            self._counters[name] += by

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = float(value)

    def observe(self, name: str, value: float) -> None:
        """One observation: its bucket counts, then (last two slots) the sum and the count."""
        with self._lock:
            h = self._hist[name]
            for i, le in enumerate(BUCKETS[name]):
                if value <= le:
                    h[i] += 1
            h[-2] += value
            h[-1] += 1

    def value(self, name: str) -> float:
        with self._lock:
            return self._counters.get(name, self._gauges.get(name, 0.0))

    def text(self) -> str:
        out: list[str] = []
        with self._lock:
            for name, v in sorted(self._gauges.items()):
                out += [f"# HELP fasttts_{name} {HELP.get(name, name)}", f"# TYPE fasttts_{name} gauge"]
                out.append(f"fasttts_{name} {v:g}")
            for name in sorted(set(self._counters) | {"requests_total", "errors_total", "rejected_total"}):
                out += [f"# HELP fasttts_{name} {HELP.get(name, name)}", f"# TYPE fasttts_{name} counter"]
                out.append(f"fasttts_{name} {self._counters.get(name, 0.0):g}")
            for name, h in sorted(self._hist.items()):
                out += [f"# HELP fasttts_{name} {HELP[name]}", f"# TYPE fasttts_{name} histogram"]
                for le, n in zip(BUCKETS[name], h, strict=False):
                    out.append(f'fasttts_{name}_bucket{{le="{le:g}"}} {n:g}')
                out.append(f'fasttts_{name}_bucket{{le="+Inf"}} {h[-1]:g}')
                out.append(f"fasttts_{name}_sum {h[-2]:g}")
                out.append(f"fasttts_{name}_count {h[-1]:g}")
        return "\n".join(out) + "\n"
