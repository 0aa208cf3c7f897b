"""`fasttts serve` as a real process on 127.0.0.1: the tiny engine (one server for the module) and the draft
voice (a second, with an API key and a one-place queue), driven by the official `openai` client and the
standard library's http.client.

Every load loop is bounded in count and time and targets loopback only.
"""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.conftest_engine import *  # noqa: F403
from tests.test_draft import needs_piper
from tests.test_streaming import stream_preset

openai = pytest.importorskip("openai", reason="the official client is in the `test` extra")
pytest.importorskip("fastapi", reason="fasttts serve needs the `serve` extra")

TEXT = "Hello there, this is the server speaking."
REQUEST_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Answer:
    def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, content

    def json(self) -> dict:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def open(self, method: str, path: str, body: dict | bytes | None = None, headers: dict | None = None):
        """(connection, response) with the body still to read (stdlib http.client: chunks as they come)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        return conn, conn.getresponse()

    def call(
        self, method: str, path: str, body: dict | bytes | None = None, headers: dict | None = None
    ) -> Answer:
        conn, r = self.open(method, path, body, headers)
        try:
            return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def post(self, body: dict | bytes, headers: dict | None = None) -> Answer:
        return self.call("POST", "/v1/audio/speech", body, headers)

    def metric(self, name: str, headers: dict | None = None) -> float:
        text = self.call("GET", "/metrics", headers=headers).text
        line = next((x for x in text.splitlines() if x.startswith(f"fasttts_{name} ")), "x 0")
        return float(line.split()[1])


def _start(args: list[str], tmp: Path) -> Iterator[Server]:
    port = _free_port()
    log = tmp / "serve.log"
    cmd = [sys.executable, "-m", "fasttts_cli", "serve", "--port", str(port), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if server.call("GET", "/health").status_code == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the server did not come up in 120 s"
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("serve-voices")
    write_test_voice(d / "alice.wav")  # noqa: F405
    write_test_voice(d / "bob.wav", 3.0, 16000, 210.0, 1)  # noqa: F405
    return d


@pytest.fixture(scope="module")
def tiny(
    tiny_engine_dir: Path, voices_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve-tiny")
    # short lines, few CFM steps: the server is under test here, not the audio
    preset = stream_preset(tmp, max_tokens=32, steps=4, first_chunk_codes=8, chunk_codes=12, context_codes=8)
    args = ["--engine", str(tiny_engine_dir), "--preset", str(preset), "--voices", str(voices_dir)]
    yield from _start([*args, "--batch-wait-ms", "20"], tmp)


def _client(server: Server, **kw) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.url}/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw
    )


def _decode(data: bytes, fmt: str, sr: int) -> np.ndarray:
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768
    if fmt in ("wav", "flac"):
        a, got = sf.read(io.BytesIO(data), dtype="float32")
        assert got == sr
        return a
    from fasttts_cli.media.ffmpeg import ffmpeg_path

    out = subprocess.run(
        [ffmpeg_path(), "-v", "error", "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", str(sr), "pipe:1"],
        input=data,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    return np.frombuffer(out, "<i2").astype(np.float32) / 32768


def test_the_openai_client_gets_every_format(tiny: Server) -> None:
    """wav and pcm stream (chunked, one beam); flac, mp3 and opus are the whole line (as `fasttts synth`):
    each kind is compared with a reference of its own kind."""
    client = _client(tiny)
    refs = {}
    for kind, fmt in (("streamed", "wav"), ("whole", "flac")):
        ref = tiny.post(
            {"model": "tts-1", "input": TEXT, "voice": "alice", "response_format": fmt, "seed": 5}
        )
        assert ref.status_code == 200 and ref.headers["content-type"] == f"audio/{fmt}"
        sr = int(ref.headers["x-sample-rate"])
        refs[kind], _ = sf.read(io.BytesIO(ref.content), dtype="float32")
        assert refs[kind].size > sr // 4
    for fmt in ("wav", "pcm", "flac", "mp3", "opus"):
        got = client.audio.speech.create(
            model="tts-1", voice="alice", input=TEXT, response_format=fmt, extra_body={"seed": 5}
        )
        want = refs["streamed" if fmt in ("wav", "pcm") else "whole"]
        a = _decode(got.content, fmt, sr)
        assert abs(a.size - want.size) <= (0.05 * sr if fmt in ("mp3", "opus") else 0), fmt  # codec padding
        if fmt in ("wav", "pcm", "flac"):
            assert np.abs(a - want).max() < 2e-4, fmt
    models = client.models.list()
    assert "tts-1" in {m.id for m in models.data}


def test_sixteen_concurrent_clients_each_get_their_whole_line(tiny: Server) -> None:
    bodies = [
        {"model": "tts-1", "input": TEXT, "voice": v, "seed": s, "response_format": "pcm"}
        for v in ("alice", "bob")
        for s in (1, 2)
    ]
    refs = [tiny.post(b).content for b in bodies]  # each alone first
    with cf.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda k: tiny.post(bodies[k % 4]), range(16)))
    for k, r in enumerate(got):
        assert r.status_code == 200, r.text
        a = np.frombuffer(r.content, "<i2").astype(np.int32)
        b = np.frombuffer(refs[k % 4], "<i2").astype(np.int32)
        assert a.size == b.size and a.size > 0 and np.abs(a - b).max() <= 8  # batch == alone (int16 steps)
    assert tiny.metric("queue_depth") == 0


def test_a_streamed_answer_starts_well_before_it_ends(tiny: Server) -> None:
    body = {"model": "tts-1", "input": TEXT, "voice": "alice", "response_format": "pcm", "seed": 3}
    t0 = time.monotonic()
    times, n = [], 0
    conn, r = tiny.open("POST", "/v1/audio/speech", body)
    assert r.status == 200
    while chunk := r.read1(65536):
        times.append(time.monotonic() - t0)
        n += len(chunk)
    conn.close()
    assert n > 0 and len(times) >= 3
    assert times[0] < 0.6 * times[-1], times
    sse = tiny.post(dict(body, stream_format="sse")).text
    events = [json.loads(x[6:]) for x in sse.splitlines() if x.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[0]["type"] == "speech.audio.delta"
    assert events[-1]["usage"]["output_tokens"] == n // 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"model": "tts-1", "input": ', "body"),
        ({"model": "tts-1", "input": TEXT, "voice": "carol"}, "voice"),
        ({"model": "tts-1", "input": "x" * 5000, "voice": "alice"}, "input"),
        ({"model": "tts-1", "input": "  ", "voice": "alice"}, "input"),
        ({"model": "tts-1", "input": TEXT, "voice": "alice", "response_format": "aiff"}, "response_format"),
        ({"model": "tts-1", "input": TEXT, "voice": "alice", "speed": 9}, "speed"),
        ({"model": "tts-1", "input": TEXT, "voice": "alice", "emotion": [1, 2]}, "emotion"),
    ],
)
def test_bad_requests_answer_400_naming_the_field(tiny: Server, body: dict | bytes, field: str) -> None:
    r = tiny.post(body)
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_a_failing_line_answers_500_and_the_server_keeps_serving(tiny: Server) -> None:
    r = tiny.post({"model": "tts-1", "input": "\u200b", "voice": "alice", "response_format": "wav"})
    assert r.status_code == 500 and "no speakable tokens" in r.json()["error"]["message"]
    ok = tiny.post({"model": "tts-1", "input": TEXT, "voice": "alice", "response_format": "wav"})
    assert ok.status_code == 200


def test_a_client_killed_mid_stream_does_not_disturb_the_others(tiny: Server) -> None:
    body = json.dumps({"model": "tts-1", "input": TEXT, "voice": "bob", "response_format": "pcm", "seed": 9})
    script = (
        "import http.client, sys\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {tiny.port}, timeout=60)\n"
        f"c.request('POST', '/v1/audio/speech', body={body!r})\n"
        "r = c.getresponse(); r.read1(1024)\n"
        "print('got', flush=True); sys.stdin.readline()\n"
    )
    before = tiny.metric("cancelled_total")
    killed = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    with cf.ThreadPoolExecutor(2) as pool:
        other = pool.submit(
            tiny.post, {"model": "tts-1", "input": TEXT, "voice": "alice", "response_format": "wav"}
        )
        assert killed.stdout is not None and killed.stdout.readline() == b"got\n"  # its first bytes came
        killed.kill()
        killed.wait(timeout=30)
        assert other.result(timeout=REQUEST_TIMEOUT).status_code == 200
    deadline = time.monotonic() + 30
    while tiny.metric("cancelled_total") <= before:
        assert time.monotonic() < deadline, "the server never noticed the client leave"
        time.sleep(0.2)
    assert (
        tiny.post({"model": "tts-1", "input": TEXT, "voice": "bob", "response_format": "pcm"}).status_code
        == 200
    )


def test_a_non_loopback_address_without_a_key_is_warned_about(voices_dir: Path, tmp_path: Path) -> None:
    # the warning comes before the engine loads; the missing engine then ends it (exit 3), nothing binds
    cmd = [sys.executable, "-m", "fasttts_cli", "serve", "--host", "0.0.0.0", "--voices", str(voices_dir)]
    r = subprocess.run([*cmd, "--engine", str(tmp_path / "none")], capture_output=True, timeout=120)
    assert r.returncode == 3 and b"not loopback" in r.stderr


# ---- the draft voice: API key, a full queue, SIGTERM (its server ends with the module) ------------------


@pytest.fixture(scope="module")
def draft(voices_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve-draft")
    args = ["--engine", "draft", "--voices", str(voices_dir), "--max-queue", "1", "--max-batch", "1"]
    env_key = os.environ.get("FASTTTS_API_KEY")
    os.environ["FASTTTS_API_KEY"] = "sekrit"
    try:
        yield from _start(args, tmp)
    finally:
        if env_key is None:
            os.environ.pop("FASTTTS_API_KEY", None)
        else:
            os.environ["FASTTTS_API_KEY"] = env_key


AUTH = {"Authorization": "Bearer sekrit"}
DRAFT_LINE = {
    "model": "tts-1",
    "input": "Hello there. This is the draft voice.",
    "voice": "alice",
    "response_format": "wav",
}


@needs_piper
def test_the_draft_server_wants_its_key_and_streams(draft: Server) -> None:
    assert draft.call("GET", "/health").status_code == 200  # health needs no key
    assert draft.post(DRAFT_LINE).status_code == 401
    client = _client(draft, api_key="sekrit")
    got = client.audio.speech.create(
        model="tts-1", voice="alice", input=DRAFT_LINE["input"], response_format="flac"
    )
    a, sr = sf.read(io.BytesIO(got.content), dtype="float32")
    assert a.size > sr


@needs_piper
def test_a_full_queue_answers_429_with_retry_after(draft: Server) -> None:
    with cf.ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda _: draft.post(DRAFT_LINE, headers=AUTH), range(6)))
    codes = [r.status_code for r in got]
    assert 429 in codes and 200 in codes and set(codes) <= {200, 429}, codes
    assert all(r.headers.get("retry-after") for r in got if r.status_code == 429)
    assert draft.metric("rejected_total", AUTH) >= 1


@needs_piper
def test_sigterm_lets_requests_in_flight_finish_and_exits_0(draft: Server) -> None:
    with cf.ThreadPoolExecutor(1) as pool:
        running = pool.submit(draft.post, DRAFT_LINE, headers=AUTH)
        deadline = time.monotonic() + 30
        while draft.metric("in_flight", AUTH) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        draft.proc.send_signal(signal.SIGTERM)
        r = running.result(timeout=REQUEST_TIMEOUT)
    assert r.status_code == 200
    a, sr = sf.read(io.BytesIO(r.content), dtype="float32")
    assert a.size > sr
    assert draft.proc.wait(timeout=60) == 0, draft.log.read_text()
