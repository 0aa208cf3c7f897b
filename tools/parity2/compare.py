#!/usr/bin/env python3
"""Compare two folders of IndexTTS-2 parity vectors key by key (a fresh oracle run with a stored set).

    python compare.py NEW_DIR REFERENCE_DIR [--json OUT]

For every vectors_*.npz in REFERENCE_DIR: keys only on one side, shape/dtype differences, and per common key
bit-identical or not, max |a - b|, rel = ||a - b|| / ||b||, and whether it is within the tolerance the tests
use (README "Tolerances": floats rel < 1e-4, integers and text exact, wav_int16 |a - b| <= 1, -inf at the
same places). Exit status 1 when anything is outside. numpy only.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def compare_arrays(key, a, b):
    row = {"key": key, "shape": list(b.shape), "dtype": str(b.dtype)}
    if a.shape != b.shape or a.dtype != b.dtype:
        return {**row, "ok": False, "why": f"{a.shape} {a.dtype} vs {b.shape} {b.dtype}"}
    row["identical"] = bool(np.array_equal(a, b))
    if b.dtype.kind == "U" or (b.dtype.kind in "iub" and key != "wav_int16"):
        return {**row, "ok": row["identical"]}
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(b64)
    same_inf = bool(np.array_equal(np.isfinite(a64), finite))
    d = np.abs(a64[finite] - b64[finite]) if same_inf else np.array([np.inf])
    row["max_abs"] = float(d.max()) if d.size else 0.0
    nb = np.linalg.norm(b64[finite]) if same_inf else 1.0
    row["rel"] = float(np.linalg.norm(d) / (nb if nb > 0 else 1.0))
    row["ok"] = same_inf and (row["max_abs"] <= 1 if key == "wav_int16" else row["rel"] < 1e-4)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("new", type=Path)
    ap.add_argument("reference", type=Path)
    ap.add_argument("--json", type=Path, help="write every row here")
    a = ap.parse_args()
    report, bad = {}, 0
    for ref_npz in sorted(a.reference.glob("vectors_*.npz")):
        new_npz = a.new / ref_npz.name
        with np.load(ref_npz, allow_pickle=False) as zb, np.load(new_npz, allow_pickle=False) as za:
            only_ref, only_new = sorted(set(zb.files) - set(za.files)), sorted(set(za.files) - set(zb.files))
            rows = [compare_arrays(k, za[k], zb[k]) for k in zb.files if k in za.files]
        outside = [r for r in rows if not r["ok"]]
        identical = sum(r.get("identical", False) for r in rows)
        worst = max((r for r in rows if "rel" in r), key=lambda r: r["rel"], default=None)
        print(
            f"{ref_npz.name}: {len(rows)} common keys, {identical} bit-identical, {len(outside)} outside the "
            f"tolerance; only in reference: {only_ref or '-'}; only in new: {only_new or '-'}"
        )
        if worst:
            print(f"  largest rel: {worst['key']} {worst['rel']:.3g} (max |a-b| {worst['max_abs']:.3g})")
        for r in rows:
            if not r.get("identical", False):
                rel, mx = r.get("rel", float("nan")), r.get("max_abs", 0)
                print(f"  {r['key']:<28} rel {rel:.3g}  max|a-b| {mx:.3g}")
        for r in outside:
            print(f"  OUTSIDE {r}")
        bad += len(outside) + len(only_ref) + len(only_new)
        report[ref_npz.name] = {"rows": rows, "only_in_reference": only_ref, "only_in_new": only_new}
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
