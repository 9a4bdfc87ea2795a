"""Comparison → terminal text and JSON (`compare --json`: `a`, `b` = each side's `predict --json`, `deltas`)."""
from __future__ import annotations

import math

from narrowpath.analysis.compare import Comparison
from narrowpath.report.analysis_json import plain
from narrowpath.report.console import table
from narrowpath.report.prediction import prediction_to_json

SHOWN_CHANGE = 1e-3
"""The text table lists the deltas that move by more than 0.1 % (JSON lists every one)."""


def comparison_to_json(c: Comparison, extra: dict | None = None) -> dict:
    return {"a": prediction_to_json(c.a.prediction), "b": prediction_to_json(c.b.prediction),
            "deltas": [plain(d) for d in c.deltas], "sentences": list(c.sentences), **(extra or {})}


def value_text(x: float | None, unit: str) -> str:
    """A value with its unit for tables: GB for bytes, percent for fractions."""
    if x is None:
        return "-"
    if unit == "B":
        return f"{x / 1e9:,.3f} GB"
    if unit == "" and abs(x) <= 1.5:
        return f"{x * 100:.2f} %"
    if unit == "FLOP":
        return f"{x:.4g}"
    return f"{x:,.4g} {unit}".strip()


def significant(d) -> bool:
    if d.delta is None:
        return d.a is not None or d.b is not None
    ref = max(abs(d.a or 0.0), abs(d.b or 0.0))
    return ref > 0 and abs(d.delta) > SHOWN_CHANGE * ref and math.isfinite(d.delta)


def band_line(label: str, pj: dict) -> str:
    """`A: step 18.79 s (band 17 – 21 s, 80 %; outside the validated regime: …)` from a predict --json."""
    extra = []
    band = pj.get("band")
    if isinstance(band, dict) and band.get("low_s") is not None and band.get("high_s") is not None:
        level = band.get("level")
        extra.append(f"band {band['low_s']:.4g} – {band['high_s']:.4g} s"
                     + (f", {level:.0%}" if isinstance(level, (int, float)) else ""))
    v = pj.get("validated")
    if isinstance(v, dict):
        extra.append(("inside" if v.get("inside") else "OUTSIDE") + " the validated regime"
                     + (f": {v['reason']}" if v.get("reason") else ""))
    return f"  {label}: step {pj['step_time_s']:.4g} s" + (f" ({'; '.join(extra)})" if extra else "")


def format_comparison(c: Comparison) -> str:
    sa, sb = c.a.prediction.scenario, c.b.prediction.scenario
    lines = [f"narrowpath compare — A: {sa.name} ({sa.num_gpus} x {sa.system.device.name})   "
             f"B: {sb.name} ({sb.num_gpus} x {sb.system.device.name})",
             band_line("A", prediction_to_json(c.a.prediction)), band_line("B", prediction_to_json(c.b.prediction)),
             "", "  WHAT CHANGED AND WHY"]
    lines += [f"  - {s}" for s in c.sentences]
    rows = [[d.account, d.item, value_text(d.a, d.unit), value_text(d.b, d.unit),
             "-" if d.delta is None else value_text(d.delta, d.unit) if d.unit else f"{d.delta * 100:+.2f} pt"]
            for d in c.deltas if significant(d)]
    lines += ["", "  DELTAS (B - A; rows that move by more than 0.1 %; --json lists all)"]
    lines.append(table(["account", "item", "A", "B", "B - A"], rows))
    return "\n".join(lines)
