"""A comparison as one self-contained HTML page: what changed and why, both steps side by side, every delta."""
from __future__ import annotations

from pathlib import Path

from narrowpath.analysis.compare import Comparison
from narrowpath.report.compare_text import significant, value_text
from narrowpath.report.html import esc, kpis, page, para, section, table
from narrowpath.report.html_report import band_text
from narrowpath.report.prediction import breakdown_label, prediction_to_json
from narrowpath.report.svg import stacked_hbar
from narrowpath.schedule.step import BREAKDOWN_KEYS


def _side(label: str, an, pj: dict) -> str:
    p = an.prediction
    s = p.scenario
    band = band_text(pj)
    v = pj.get("validated")
    regime = "" if not isinstance(v, dict) else para(
        ("Inside" if v.get("inside") else "OUTSIDE") + " the validated regime"
        + (f": {v['reason']}" if v.get("reason") else "") + ".", "" if v.get("inside") else "warn")
    return (f"<h3>{esc(label)}: {esc(s.name)}</h3>"
            + para(f"{s.model.name} on {s.num_gpus:,} × {s.system.device.name} ({s.system.name}); step "
                   f"{p.step_time_s:.4g} s" + (f" (band {band})" if band else "") + f"; {p.tokens_per_s:,.0f} tokens/s",
                   "sub") + regime
            + stacked_hbar(f"{label}: step {p.step_time_s:.4g} s",
                           [(breakdown_label(p, k), p.breakdown_s[k]) for k in BREAKDOWN_KEYS], "s"))


def compare_html(c: Comparison) -> str:
    pa, pb = c.a.prediction, c.b.prediction
    ja, jb = prediction_to_json(pa), prediction_to_json(pb)
    d = pb.step_time_s - pa.step_time_s
    head = (f"<h1>narrowpath compare — {esc(pa.scenario.name)} vs {esc(pb.scenario.name)}</h1>"
            + kpis([(f"{pa.step_time_s:.4g} s", "A: step"), (f"{pb.step_time_s:.4g} s", "B: step"),
                    (f"{d:+.4g} s ({d / pa.step_time_s:+.1%})", "B − A"),
                    (f"{pb.tokens_per_s / pa.tokens_per_s:.4g}×", "B / A tokens per second")]))
    why = section("why", "What changed and why", "<ol>" + "".join(f"<li>{esc(s)}</li>" for s in c.sentences)
                  + "</ol>")
    sides = section("sides", "Side by side", f'<div class="figs"><div>{_side("A", c.a, ja)}</div>'
                                             f'<div>{_side("B", c.b, jb)}</div></div>')
    rows, classes = [], []
    for x in c.deltas:
        rows.append([x.account, x.item, value_text(x.a, x.unit), value_text(x.b, x.unit),
                     "-" if x.delta is None else (value_text(x.delta, x.unit) if x.unit else f"{x.delta * 100:+.2f} pt"),
                     f"{x.source}: {x.path}"])
        classes.append("" if significant(x) else "dim")
    deltas = section("deltas", "Every account and budget", para(
        "B − A for every number; greyed rows move by less than 0.1 %. The last column is where the value is read: "
        "the side's `predict --json` or `analyze --json`.", "note"),
        table(["account", "item", "A", "B", "B − A", "from"], rows, row_classes=classes, text_cols=(1, 5)))
    return page(f"narrowpath compare — {pa.scenario.name} vs {pb.scenario.name}", head + why + sides + deltas)


def write_compare_html(c: Comparison, path: str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(compare_html(c), encoding="utf-8")
    tmp.replace(out)
    return out
