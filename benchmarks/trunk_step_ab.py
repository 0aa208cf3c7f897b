"""Side-by-side decode-step time of two in-place GPT trunk graphs (A/B) in one process.

    python benchmarks/trunk_step_ab.py A/gpt_trunk.onnx B/gpt_trunk.onnx --batch 1 --past 150

Both graphs get the same decode step (one new token per row after `--past` cached tokens, buffers bound
in place as the runtime binds them); the steps alternate A, B, A, B... so a drift in machine speed hits
both sides alike. Prints the median ms per step of each and the ratio A/B. The layer and head counts
come from the graph's inputs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort


def _session(path: str, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _shapes(s: ort.InferenceSession) -> tuple[int, int, int, int]:
    ins = {i.name: i.shape for i in s.get_inputs()}
    layers = sum(1 for n in ins if n.startswith("past_key_"))
    _, heads, _, head_dim = ins["past_key_0"]
    width = ins["inputs_embeds"][2]
    return layers, int(heads), int(head_dim), int(width)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--past", type=int, default=150)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sessions = [_session(p, args.threads) for p in (args.a, args.b)]
    layers, heads, head_dim, width = _shapes(sessions[0])
    if _shapes(sessions[1]) != (layers, heads, head_dim, width):
        raise SystemExit("the two graphs have different shapes")
    b, cap = args.batch, args.past + 64
    kv = [np.zeros((b, heads, cap, head_dim), np.float32) for _ in range(2 * layers)]
    rng = np.random.default_rng(0)

    def step(s: ort.InferenceSession) -> float:
        io = s.io_binding()
        io.bind_cpu_input("inputs_embeds", rng.standard_normal((b, 1, width), dtype=np.float32))
        io.bind_cpu_input("seqlens_k", np.full(b, args.past, np.int32))
        io.bind_cpu_input("total_sequence_length", np.array(args.past + 1, np.int32))
        io.bind_cpu_input("last_index", np.zeros(b, np.int64))
        for o in s.get_outputs()[:2]:
            io.bind_output(o.name)
        for i in range(layers):
            for j, kind in enumerate(("key", "value")):
                v = ort.OrtValue.ortvalue_from_numpy(kv[2 * i + j])
                io.bind_ortvalue_input(f"past_{kind}_{i}", v)
                io.bind_ortvalue_output(f"present_{kind}_{i}", v)
        t = time.perf_counter()
        s.run_with_iobinding(io)
        return time.perf_counter() - t

    for s in sessions:
        for _ in range(3):
            step(s)
    times: list[list[float]] = [[], []]
    for _ in range(args.steps):
        for k, s in enumerate(sessions):
            times[k].append(step(s))
    a, bb = (1000 * float(np.median(t)) for t in times)
    print(
        f"batch {b}, past {args.past}, {args.threads} threads, {args.steps} alternating steps each: "
        f"A {a:.1f} ms/step, B {bb:.1f} ms/step, A/B {a / bb:.3f}"
    )


if __name__ == "__main__":
    main()
