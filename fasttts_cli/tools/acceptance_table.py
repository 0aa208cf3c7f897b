"""The one result table every GPU acceptance program ends with, and its JSON form.

Each program (torch, TensorRT, TensorRT-LLM) appends `Check`s and ends with `finish`, so a person reads one
table and a shell pipeline reads one JSON file; the exit status is 1 when any check failed, never hidden."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter
from typing import TextIO


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""
    seconds: float = 0.0
    # "ran" on the real library; "sim" through a fake or a CPU stand-in; "skipped" with the reason in detail
    mode: str = "ran"


@dataclass
class Table:
    program: str
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str = "", seconds: float = 0.0, mode: str = "ran") -> Check:
        check = Check(name, bool(ok), detail, round(float(seconds), 3), mode)
        self.checks.append(check)
        return check

    @contextmanager
    def timed(self, name: str, mode: str = "ran") -> Iterator[list[str]]:
        """`with table.timed("x") as detail: ...` records ok unless the body raises; `detail` collects
        text. An exception becomes a failed check with its message, and the program goes on."""
        detail: list[str] = []
        t0 = perf_counter()
        try:
            yield detail
        except Exception as ex:  # a failed check is reported, not raised
            self.add(
                name, False, "; ".join([*detail, f"{type(ex).__name__}: {ex}"]), perf_counter() - t0, mode
            )
        else:
            self.add(name, True, "; ".join(detail), perf_counter() - t0, mode)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks if c.mode != "skipped") and any(
            c.mode != "skipped" for c in self.checks
        )

    def render(self) -> str:
        rows = [("check", "mode", "result", "s", "detail")] + [
            (
                c.name,
                c.mode,
                "ok" if c.ok else ("skip" if c.mode == "skipped" else "FAIL"),
                f"{c.seconds:.1f}",
                c.detail,
            )
            for c in self.checks
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [f"== {self.program}: {'ok' if self.ok else 'FAILED'}"]
        for r in rows:
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
        return "\n".join(lines)

    def finish(self, out_dir: Path | str | None = None, stream: TextIO | None = None) -> int:
        """Print the table, write `<program>.json` under out_dir (default $OUT, else none); exit status."""
        print(self.render(), file=stream or sys.stdout, flush=True)
        target = out_dir if out_dir is not None else os.environ.get("OUT")
        if target:
            path = Path(target) / f"{self.program}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
            tmp.write_text(
                json.dumps(
                    {"program": self.program, "ok": self.ok, "checks": [asdict(c) for c in self.checks]},
                    indent=2,
                )
            )
            tmp.replace(path)
        return 0 if self.ok else 1
