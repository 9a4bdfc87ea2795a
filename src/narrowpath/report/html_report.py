"""The HTML report of one analysis: prediction with its error band, verdict and what-ifs, the step, the five
accounts, memory, the three budgets, energy, the timeline and the validation evidence behind the numbers.

Everything comes from the Analysis and the prediction's own JSON (`report.prediction.prediction_to_json`, which
carries `band` and `validated` when the model provides them); nothing is computed here that the terminal and
JSON outputs do not also show.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from narrowpath.analysis import Analysis
from narrowpath.analysis.flop_conventions import CONVENTIONS, flop_conventions
from narrowpath.analysis.verdict import component_label
from narrowpath.errors import NarrowpathError
from narrowpath.report.html import esc, kpis, page, para, section, table
from narrowpath.report.html_accounts import (accounts_section, breakdown_section, budgets_section, energy_section,
                                             memory_section, ms, pct, timeline_section)
from narrowpath.report.prediction import host_words, prediction_to_json, schedule_words
from narrowpath.schedule.step import predict
from narrowpath.validate.corpus import load_corpus

NAV = (("verdict", "verdict"), ("breakdown", "step"), ("accounts", "accounts"), ("memory", "memory"),
       ("budgets", "budgets"), ("energy", "energy"), ("timeline", "timeline"), ("evidence", "evidence"))
MAX_EVIDENCE_CASES = 12


def band_text(pj: dict) -> str:
    """`[low – high s, level]` of the prediction's error band, or '' when the model gives none."""
    band = pj.get("band")
    if not isinstance(band, dict) or band.get("low_s") is None or band.get("high_s") is None:
        return ""
    level = band.get("level")
    lv = f", {level:.0%} band" if isinstance(level, (int, float)) else ""
    return f"{band['low_s']:.4g} – {band['high_s']:.4g} s{lv}"


def header(a: Analysis, pj: dict) -> str:
    p = a.prediction
    s, plan = p.scenario, p.scenario.plan
    fc = flop_conventions(p)
    fac = {e.level: e for e in a.energy.levels}.get("facility")
    band = band_text(pj)
    m = p.memory
    items = [(f"{p.step_time_s:.4g} s", "step time" + (f" (band {band})" if band else "")),
             (f"{p.tokens_per_s:,.0f}", "tokens per second"),
             (f"{fc.mfu * 100:.1f} % · {fc.mfu_causal * 100:.1f} %", "MFU: all attention scores · causal"),
             (f"{fc.hfu * 100:.1f} %", "HFU: FLOPs executed"),
             (f"{m.total_bytes / 1e9:.1f} / {m.capacity_bytes / 1e9:.1f} GB", "memory per GPU" +
              ("" if m.fits else " — DOES NOT FIT")),
             (f"{fac.per_token_j:.3g} J" if fac else "-", "energy per token at the facility"),
             (f"{a.verdict.share:.0%}", f"narrowest path: {component_label(a.context, a.verdict.narrowest)}")]
    nav = "<nav>" + "".join(f'<a href="#{k}">{v}</a>' for k, v in NAV) + "</nav>"
    desc = (f"{s.model.name} on {s.num_gpus:,} × {s.system.device.name} ({s.system.name}); tp={plan.tp} pp={plan.pp} "
            f"dp={plan.dp} cp={plan.cp} ep={plan.ep} vpp={plan.vpp} " + "".join(f"{w} " for w in schedule_words(plan))
            + f"mbs={plan.mbs} gbs={plan.gbs} "
            f"zero={plan.zero_stage} recompute={plan.recompute} sp={plan.sequence_parallel} {plan.precision}"
            f"{host_words(plan)}; sequence {s.model.seq_len:,} tokens")
    return (f"<h1>narrowpath report — {esc(s.name)}</h1>" + para(desc, "sub") + nav + kpis(items)
            + para("MFU conventions: " + "; ".join(f"{k}: {v}" for k, v in CONVENTIONS.items()) + ".", "note"))


def verdict_section(a: Analysis) -> str:
    v = a.verdict
    rows, classes = [], []
    for i, w in enumerate(v.what_ifs):
        rows.append([i + 1 if w.status == "faster" else "-", w.kind,
                     w.description + (f" [repaired: {'; '.join(w.repairs)}]" if w.repairs else ""),
                     "-" if w.step_s is None else f"{w.step_s:.4g}", "-" if w.step_s is None else ms(w.gain_s),
                     "-" if w.step_s is None else pct(w.gain_fraction),
                     "-" if w.energy_per_token_j is None else f"{w.energy_per_token_j:.3g}",
                     w.skipped if w.skipped.startswith("no gain:") or w.status not in ("faster", "no gain", "slower")
                     else w.status])
        classes.append("" if w.status == "faster" else "dim")
    base_e = {e.level: e for e in a.energy.levels}.get("facility")
    note = (f" J/token: facility-level energy per token of the changed scenario (this one: "
            f"{base_e.per_token_j:.3g} J with its checkpoint writes).") if base_e else ""
    wt = table(["rank", "kind", "change", "step (s)", "gain (ms)", "gain (%)", "J/token", "status"], rows,
               text_cols=(2, 7), row_classes=classes) if rows else para("What-ifs were not run (--no-what-ifs).", "note")
    return section("verdict", "Verdict and what-ifs", f'<div class="verdict">{esc(v.sentence)}</div>',
                   para("Each change is a re-prediction of a changed copy of the scenario; only changes that make "
                        "the step faster are ranked. Plan changes that break a divisibility rule are repaired to the "
                        "nearest valid plan, and the repair is named." + note, "note"), wt)


@lru_cache(maxsize=1)
def shipped_cases() -> tuple:
    """Every buildable case of the shipped training corpora, read once per process (reading them is most of a
    report's time)."""
    return tuple(c for c in load_corpus(None) if c.scenario is not None and c.measured_step_time_s)


def _evidence_cases(a: Analysis, pj: dict) -> tuple[list, str]:
    """Shipped validation cases behind this prediction: the model's nearest ones when it names them, else the
    cases on the same device."""
    try:
        cases = list(shipped_cases())
    except NarrowpathError as exc:
        return [], f"the shipped validation corpus could not be read: {exc}"
    nearest = (pj.get("validated") or {}).get("nearest") or []
    chosen = [c for c in cases if c.id in nearest]
    why = "the validated cases nearest to this scenario (the model's own choice)"
    if not chosen:
        dev = a.prediction.scenario.system.device.name
        chosen = [c for c in cases if c.scenario.system.device.name == dev]
        why = f"the shipped validation cases on the same device ({dev})"
        if not chosen:
            chosen, why = cases, "no shipped validation case uses this device; all shipped cases"
    n = a.prediction.scenario.num_gpus
    chosen.sort(key=lambda c: abs(c.scenario.num_gpus - n))
    return chosen[:MAX_EVIDENCE_CASES], why


def evidence_section(a: Analysis, pj: dict) -> str:
    parts = []
    band = band_text(pj)
    v = pj.get("validated")
    if band:
        parts.append(para(f"Error band of the step time: {band}."))
    if isinstance(v, dict):
        inside = v.get("inside")
        parts.append(para(("Inside" if inside else "OUTSIDE") + " the validated regime"
                          + (f": {v.get('reason')}" if v.get("reason") else "") + ".", "" if inside else "warn"))
    if not band and not isinstance(v, dict):
        parts.append(para("This prediction carries no error band; the cases below show how far the model was from "
                          "published measurements.", "note"))
    cases, why = _evidence_cases(a, pj)
    rows, errs = [], []
    for c in cases:
        try:
            t = predict(c.scenario).step_time_s
        except NarrowpathError as exc:
            rows.append([c.id, c.scenario.num_gpus, "-", f"{c.measured_step_time_s:.4g}", "-", str(exc)])
            continue
        err = (t - c.measured_step_time_s) / c.measured_step_time_s
        errs.append(abs(err))
        rows.append([c.id, c.scenario.num_gpus, f"{t:.4g}", f"{c.measured_step_time_s:.4g}", f"{err * 100:+.1f}",
                     c.source])
    parts.append(para(f"Evidence: {why}." + (f" Mean |error| {sum(errs) / len(errs):.1%}, worst {max(errs):.1%}."
                                             if errs else "")))
    if rows:
        parts.append(table(["case", "GPUs", "predicted (s)", "measured (s)", "error (%)", "source"], rows,
                           text_cols=(5,)))
    parts.append("<h3>Assumptions</h3><ul>" + "".join(f"<li>{esc(x)}</li>" for x in a.prediction.assumptions)
                 + "</ul>")
    return section("evidence", "Validation evidence and assumptions", *parts)


def report_html(a: Analysis) -> str:
    """The whole report page of analysis `a`."""
    pj = prediction_to_json(a.prediction)
    body = "".join([header(a, pj), verdict_section(a), breakdown_section(a), accounts_section(a), memory_section(a),
                    budgets_section(a), energy_section(a), timeline_section(a), evidence_section(a, pj)])
    return page(f"narrowpath report — {a.prediction.scenario.name}", body)


def write_report(a: Analysis, path: str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(report_html(a), encoding="utf-8")
    tmp.replace(out)
    return out
