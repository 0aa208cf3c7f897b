"""s2mel cache policies: which (module, layer, step) computations to skip, per threshold level.

A policy is a table of letters: for the attention and the FFN of each DiT block, one letter per Euler step
("C" compute, "T" temporal skip, "B" branch skip; see core.py), plus a head row ("C" or "B"). Levels
T1..T6 are calibration thresholds on the final output's mean absolute error relative to the mel's dynamic
range (`LEVELS`); T0 is off and needs no table.

The file `s2mel_cache_policy.json` in the engine folder holds the tables of every calibrated level with
the run settings they were calibrated for (steps, schedule, CFG rate) and the identity of the engine
(model, checkpoint digest, DiT precision): a policy calibrated on another engine, or for other run
settings, is refused with a message naming both sides. No torch import: the runtime reads this.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.cfm.loop import BRANCH, COMPUTE, TEMPORAL, head_units, module_units
from fasttts_cli.errors import EngineMismatchError, UsageError
from fasttts_cli.spec.engine_folder import Manifest, read_manifest, write_manifest

POLICY_FILE = "s2mel_cache_policy.json"
FORMAT_VERSION = 1
# Relative final-output MAE (fraction of the reference mel's dynamic range) a level allows.
LEVELS: dict[str, float] = {
    "T0": 0.0,
    "T1": 0.0025,
    "T2": 0.005,
    "T3": 0.01,
    "T4": 0.02,
    "T5": 0.04,
    "T6": 0.08,
}
DIT_COMPONENTS = ("dit_cfg_step", "dit")  # manifest component / preset group whose precision matters


def level_threshold(level: str) -> float:
    if level not in LEVELS:
        raise UsageError(f"s2mel cache level {level!r} is unknown", hint=f"levels: {', '.join(LEVELS)}")
    return LEVELS[level]


@dataclass(frozen=True)
class Policy:
    """One level's decision table (implements core.Plan)."""

    level: str
    threshold: float
    attn: tuple[str, ...]  # per layer, one letter per step
    ffn: tuple[str, ...]
    head_row: str  # one letter per step, C or B
    error: float | None = None  # relative MAE the calibration reached on its data

    @property
    def depth(self) -> int:
        return len(self.attn)

    @property
    def steps(self) -> int:
        return len(self.head_row)

    def module(self, kind: str, layer: int, step: int) -> str:
        return (self.attn if kind == "attn" else self.ffn)[layer][step]

    def head(self, step: int) -> str:
        return self.head_row[step]

    @staticmethod
    def full(depth: int, steps: int, level: str = "T0") -> Policy:
        row = COMPUTE * steps
        return Policy(level, LEVELS.get(level, 0.0), (row,) * depth, (row,) * depth, row)

    @staticmethod
    def from_table(
        level: str, threshold: float, table: Mapping[str, Sequence[str]], head_row: str, error: float | None
    ) -> Policy:
        return Policy(level, threshold, tuple(table["attn"]), tuple(table["ffn"]), head_row, error)

    def validate(self) -> None:
        """Every row has `steps` letters; a skip only after something to reuse exists."""
        if len(self.ffn) != self.depth:
            raise ValueError(
                f"policy {self.level}: {len(self.attn)} attention rows, {len(self.ffn)} FFN rows"
            )
        for kind, rows in (("attn", self.attn), ("ffn", self.ffn)):
            for layer, row in enumerate(rows):
                _check_row(row, self.steps, f"{kind} {layer}", allowed=COMPUTE + TEMPORAL + BRANCH)
        _check_row(self.head_row, self.steps, "head", allowed=COMPUTE + BRANCH)

    def kept_fraction(self) -> float:
        """Fraction of attention/FFN branch evaluations computed (C = both branches, B = one, T = none)."""
        kept, total = module_units(self, self.depth, self.steps)
        return kept / total

    def head_fraction(self) -> float:
        kept, total = head_units(self, self.steps)
        return kept / total

    def counts(self) -> dict[str, int]:
        letters = "".join(self.attn) + "".join(self.ffn)
        return {d: letters.count(d) for d in (COMPUTE, TEMPORAL, BRANCH)} | {
            "head_B": self.head_row.count(BRANCH)
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["attn"], d["ffn"] = list(self.attn), list(self.ffn)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Policy:
        p = Policy(
            str(d["level"]),
            float(d["threshold"]),
            tuple(d["attn"]),
            tuple(d["ffn"]),
            str(d["head_row"]),
            None if d.get("error") is None else float(d["error"]),
        )
        p.validate()
        return p


def _check_row(row: str, steps: int, what: str, allowed: str) -> None:
    if len(row) != steps:
        raise ValueError(f"{what}: {len(row)} decisions for {steps} steps")
    bad = set(row) - set(allowed)
    if bad:
        raise ValueError(f"{what}: unknown decisions {sorted(bad)} (allowed: {', '.join(allowed)})")
    if row and row[0] != COMPUTE:
        raise ValueError(f"{what}: the first step must compute (nothing is cached yet)")


@dataclass(frozen=True)
class PolicySet:
    """The policy file: tables per level, the run settings they hold for, and the engine they belong to."""

    engine_id: str
    depth: int
    steps: int
    schedule: str
    cfg_rate: float
    levels: dict[str, Policy] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)  # provenance: data, seed, measure, timing
    format_version: int = FORMAT_VERSION

    def policy(self, level: str) -> Policy | None:
        """The table for `level`; None for T0 (off)."""
        level_threshold(level)
        if level == "T0":
            return None
        if level not in self.levels:
            raise UsageError(
                f"s2mel cache level {level} was not calibrated for this engine "
                f"(calibrated: {', '.join(sorted(self.levels)) or 'none'})",
                hint=f"run `fasttts calibrate --level {level}` or pick a calibrated level",
            )
        return self.levels[level]

    def check_run(self, steps: int, schedule: str, cfg_rate: float, where: str = "policy") -> None:
        """Refuse run settings the tables were not calibrated for."""
        diff = []
        if steps != self.steps:
            diff.append(f"steps {steps} (calibrated for {self.steps})")
        if schedule != self.schedule:
            diff.append(f"schedule {schedule!r} (calibrated for {self.schedule!r})")
        if abs(float(cfg_rate) - self.cfg_rate) > 1e-9:
            diff.append(f"cfg_rate {cfg_rate} (calibrated for {self.cfg_rate})")
        if diff:
            raise EngineMismatchError(
                f"{where}: the s2mel cache policy does not apply to this run: " + "; ".join(diff),
                hint="recalibrate with these s2mel settings or use cache level T0",
            )

    def to_json(self) -> str:
        d = asdict(self)
        d["levels"] = {k: v.to_dict() for k, v in sorted(self.levels.items())}
        return json.dumps(d, indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str, where: str = "policy") -> PolicySet:
        try:
            d = json.loads(text)
            if d.get("format_version") != FORMAT_VERSION:
                raise EngineMismatchError(
                    f"{where}: policy format_version {d.get('format_version')!r}, this fasttts reads "
                    f"{FORMAT_VERSION}",
                    hint="recalibrate with `fasttts calibrate`",
                )
            levels = {k: Policy.from_dict(v) for k, v in d["levels"].items()}
            ps = PolicySet(
                engine_id=str(d["engine_id"]),
                depth=int(d["depth"]),
                steps=int(d["steps"]),
                schedule=str(d["schedule"]),
                cfg_rate=float(d["cfg_rate"]),
                levels=levels,
                calibration=dict(d.get("calibration", {})),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise EngineMismatchError(f"{where}: not a valid s2mel cache policy: {e}") from None
        for name, p in ps.levels.items():
            if p.level != name or p.depth != ps.depth or p.steps != ps.steps:
                raise EngineMismatchError(f"{where}: level {name} table does not match the file's shape")
        return ps


# ------------------------------------------------------------------------------------------- identity


def identity_digest(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def engine_identity(manifest: Manifest) -> str:
    """What a policy is bound to: the model, the checkpoint's digest and the precision the DiT runs at.
    (Not Manifest.identity(): that one includes the policy itself.)"""
    precision = "fp32"
    for name in DIT_COMPONENTS:
        if name in manifest.components:
            precision = manifest.components[name].precision
            break
    else:
        comps = manifest.preset_build_keys.get("components", {}) if manifest.preset_build_keys else {}
        for name in DIT_COMPONENTS:
            if isinstance(comps.get(name), Mapping):
                precision = str(comps[name].get("precision", precision))
                break
    return identity_digest(
        model=manifest.model_id,
        version=str(manifest.model_version),
        checkpoint=manifest.checkpoint_digest,
        dit_precision=precision,
    )


# ------------------------------------------------------------------------------------------- files


def _check_engine(ps: PolicySet, manifest: Manifest, where: Path, hint: str) -> None:
    """Refuse a policy calibrated for another engine, whether about to be written or found in the folder."""
    want = engine_identity(manifest)
    if ps.engine_id != want:
        raise EngineMismatchError(
            f"{where}: this s2mel cache policy belongs to another engine (calibrated for engine "
            f"{ps.engine_id[:16]}, this engine is {want[:16]}: a different checkpoint or DiT precision)",
            hint=hint,
        )


def write_policy_set(engine_dir: Path | str, ps: PolicySet) -> Path:
    """Write the policy file atomically into the engine folder and record it in the manifest (its
    `s2mel_cache_policy` entry changes the engine's identity, so cached audio keyed on it is redone).
    Refuses a policy calibrated for another engine."""
    folder = Path(engine_dir)
    manifest = read_manifest(folder)
    _check_engine(ps, manifest, folder, "calibrate on this engine with `fasttts calibrate --engine`")
    text = ps.to_json()
    tmp = folder / (POLICY_FILE + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / POLICY_FILE)
    summary = {
        "file": POLICY_FILE,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "levels": sorted(ps.levels),
        "steps": ps.steps,
        "schedule": ps.schedule,
        "cfg_rate": ps.cfg_rate,
    }
    fresh = Manifest.from_dict(json.loads(manifest.to_json()) | {"s2mel_cache_policy": summary})
    write_manifest(folder, fresh)
    return folder / POLICY_FILE


def read_policy_set(engine_dir: Path | str, manifest: Manifest | None = None) -> PolicySet | None:
    """The engine's policy file, checked against the engine; None when the engine has none."""
    folder = Path(engine_dir)
    path = folder / POLICY_FILE
    if not path.is_file():
        return None
    manifest = manifest or read_manifest(folder)
    ps = PolicySet.from_json(path.read_text(encoding="utf-8"), str(path))
    _check_engine(ps, manifest, path, "recalibrate with `fasttts calibrate --engine` or use cache level T0")
    return ps


def load_policy(
    engine_dir: Path | str,
    level: str,
    *,
    steps: int,
    schedule: str,
    cfg_rate: float,
    manifest: Manifest | None = None,
) -> Policy | None:
    """The policy a run at `level` uses (None for T0), refusing one from another engine or for other
    run settings. This is what the engine's CFM calls before running the pieces."""
    if level_threshold(level) == 0.0:
        return None
    ps = read_policy_set(engine_dir, manifest)
    if ps is None:
        raise UsageError(
            f"{Path(engine_dir)}: s2mel cache level {level} needs a calibrated policy; this engine has none",
            hint="run `fasttts calibrate --engine DIR --voice REF.wav ...` or use cache level T0",
        )
    ps.check_run(steps, schedule, cfg_rate, str(Path(engine_dir) / POLICY_FILE))
    return ps.policy(level)
