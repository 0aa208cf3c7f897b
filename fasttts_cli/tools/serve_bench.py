"""Serving benchmark: time to first audio and throughput by concurrency, streaming vs whole-line, server vs
separate `fasttts synth` processes. A program, not a test (benchmarks/serve_bench.py runs it on the tiny
and parity-size engines; tools/accept_torch.py on the lent GPU).

Modes, alternated within each concurrency (one run, the order rotated per row, so drift in a shared
machine's load spreads over all modes):
- `server-stream`: `fasttts serve`, pcm streamed; first audio = the first body bytes at the client.
- `server-whole`: the same server, flac (the whole line synthesized, then encoded); first audio = the
  whole answer.
- `processes`: one `fasttts synth` process per client (engine load and voice preparation included,
  which is what a process per line costs); first audio = the process's end.
Throughput: lines answered per wall second of the row, and seconds of audio per wall second.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.client
import io
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

MODES = ("server-stream", "server-whole", "processes")
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away."


@dataclass
class Row:
    engine: str
    mode: str
    clients: int
    first_p50: float
    first_max: float
    wall: float
    lines_per_s: float
    audio_per_s: float
    errors: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`fasttts serve` on a free loopback port, up until `close` (SIGTERM)."""

    def __init__(
        self, engine: str, preset: str | None, voices: Path, log: Path, timeout: float = 600
    ) -> None:
        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "fasttts_cli",
            "serve",
            "--port",
            str(self.port),
            "--voices",
            str(voices),
        ]
        cmd += ["--engine", engine] + (["--preset", preset] if preset else [])
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fasttts serve did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            c.request("GET", "/health")
            return c.getresponse().status == 200
        except OSError:
            return False

    def speech(self, body: dict, timeout: float = 600) -> tuple[float, float, bytes, int]:
        """(first body bytes s, end s, the body, status) of one request."""
        t0 = time.monotonic()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(
            "POST", "/v1/audio/speech", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        r = c.getresponse()
        first, parts = None, []
        while chunk := r.read1(65536):
            first = first if first is not None else time.monotonic() - t0
            parts.append(chunk)
        c.close()
        end = time.monotonic() - t0
        return (first if first is not None else end), end, b"".join(parts), r.status

    def warm(self, voice: str) -> None:
        """One line first: sessions open and the voice's conditioning is made before anything is timed."""
        self.speech({"model": "tts-1", "input": "Warm up.", "voice": voice, "response_format": "pcm"})

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _server_row(server: ServerProcess, label: str, mode: str, n: int, voice: str, sr: int, text: str) -> Row:
    fmt = "pcm" if mode == "server-stream" else "flac"
    bodies = [
        {"model": "tts-1", "input": text, "voice": voice, "response_format": fmt, "seed": k} for k in range(n)
    ]
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(n) as pool:
        got = list(pool.map(server.speech, bodies))
    wall = time.monotonic() - t0
    ok = [g for g in got if g[3] == 200]
    firsts = [g[0] if mode == "server-stream" else g[1] for g in ok]
    audio = sum(_seconds(g[2], fmt, sr) for g in ok)
    return _row(label, mode, n, firsts, wall, len(ok), audio, n - len(ok))


def _seconds(body: bytes, fmt: str, sr: int) -> float:
    if fmt == "pcm":
        return len(body) / 2 / sr
    import soundfile as sf

    return float(sf.info(io.BytesIO(body)).frames) / sr


def _process_row(label: str, engine: str, preset: str | None, voice: Path, n: int, text: str) -> Row:
    def one(k: int) -> tuple[float, float, int]:
        with tempfile.TemporaryDirectory(prefix="fasttts-bench-") as tmp:
            cmd = [
                sys.executable,
                "-m",
                "fasttts_cli",
                "synth",
                text,
                "--voice",
                str(voice),
                "--engine",
                engine,
            ]
            cmd += (["--preset", preset] if preset else []) + [
                "--seed",
                str(k),
                "-o",
                f"{tmp}/o.wav",
                "--json",
            ]
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, timeout=1800)
            end = time.monotonic() - t0
            dur = json.loads(r.stdout)["duration"] if r.returncode == 0 else 0.0
            return end, float(dur), r.returncode

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(n) as pool:
        got = list(pool.map(one, range(n)))
    wall = time.monotonic() - t0
    ok = [g for g in got if g[2] == 0]
    return _row(label, "processes", n, [g[0] for g in ok], wall, len(ok), sum(g[1] for g in ok), n - len(ok))


def _row(
    label: str, mode: str, n: int, firsts: list[float], wall: float, done: int, audio: float, errors: int
) -> Row:
    return Row(
        label,
        mode,
        n,
        round(statistics.median(firsts), 3) if firsts else float("nan"),
        round(max(firsts), 3) if firsts else float("nan"),
        round(wall, 2),
        round(done / wall, 3),
        round(audio / wall, 3),
        errors,
    )


def serve_table(
    engine: str,
    voice: Path,
    *,
    label: str,
    preset: str | None = None,
    clients: Sequence[int] = (1, 4, 16),
    modes: Sequence[str] = MODES,
    text: str = TEXT,
    log_dir: Path | None = None,
) -> list[Row]:
    """Every (concurrency, mode) once, modes rotated per concurrency; one server for the server modes."""
    work = Path(tempfile.mkdtemp(prefix="fasttts-serve-bench-"))
    voices = work / "voices"
    voices.mkdir()
    (voices / "ref.wav").symlink_to(Path(voice).resolve())
    server = ServerProcess(engine, preset, voices, (log_dir or work) / f"serve-{label}.log")
    try:
        server.warm("ref")
        sr = _sample_rate(server)
        rows: list[Row] = []
        for i, n in enumerate(clients):
            order = list(modes[i % len(modes) :]) + list(modes[: i % len(modes)])
            for mode in order:
                if mode == "processes":
                    rows.append(_process_row(label, engine, preset, voice, n, text))
                else:
                    rows.append(_server_row(server, label, mode, n, "ref", sr, text))
                print(_line(rows[-1]), file=sys.stderr, flush=True)
        return rows
    finally:
        server.close()


def _sample_rate(server: ServerProcess) -> int:
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    c.request("GET", "/health")
    return int(json.loads(c.getresponse().read())["engine"]["sample_rate"])


HEADER = (
    "| engine | mode | clients | first audio p50 (s) | max (s) | wall (s) | lines/s | audio s/s | errors |"
)


def _line(r: Row) -> str:
    return (
        f"| {r.engine} | {r.mode} | {r.clients} | {r.first_p50} | {r.first_max} | {r.wall} | {r.lines_per_s} "
        f"| {r.audio_per_s} | {r.errors} |"
    )


def markdown(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, "|" + " --- |" * 9, *(_line(r) for r in rows)])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", action="append", required=True, metavar="LABEL=PATH", help="repeatable")
    ap.add_argument("--voice", type=Path, required=True)
    ap.add_argument("--preset", default=None)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    rows: list[Row] = []
    for spec in a.engine:
        label, _, path = spec.rpartition("=")
        rows += serve_table(
            path,
            a.voice,
            label=label or Path(path).name,
            preset=a.preset,
            clients=[int(x) for x in a.clients.split(",")],
            modes=[m for m in a.modes.split(",") if m],
            text=a.text,
        )
    print(markdown(rows))
    if a.json:
        a.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0 if all(r.errors == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
