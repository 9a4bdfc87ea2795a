"""`narrowpath compare A B`: two scenarios side by side — every account and budget with its delta, and what changed
and why, one sentence per line. B may be a what-if of A (`--what-if ID`, or `--what-if top` for A's best one)."""
from __future__ import annotations

import dataclasses
import json

from narrowpath.analysis import AnalysisOptions, analyze_prediction
from narrowpath.analysis.compare import compare
from narrowpath.cli.common import load_any_scenario
from narrowpath.cli.common import check_html_file, writing
from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.report.compare_text import comparison_to_json, format_comparison
from narrowpath.schedule.step import predict


def register(sub) -> None:
    p = sub.add_parser("compare", help="two scenarios (or a scenario and a what-if) side by side, with deltas and "
                                       "what changed and why",
                       description="Compare B against A: every account and budget with its delta (B - A) and one "
                                   "sentence per change. A and B are scenario files or catalog scenario ids; "
                                   "with --what-if, B is A changed by one of A's verdict what-ifs.")
    p.add_argument("a", metavar="A", help="scenario file or catalog scenario id")
    p.add_argument("b", metavar="B", nargs="?", help="scenario file or catalog scenario id (omit with --what-if)")
    p.add_argument("--what-if", dest="what_if", metavar="ID",
                   help="B = A changed by this what-if (its id as `analyze --json` lists it, e.g. tp_comm_overlap), "
                        "or `top` for A's top-ranked one")
    p.add_argument("--json", action="store_true", help="machine-readable output: a, b (predict --json), deltas")
    p.add_argument("--html", metavar="FILE", help="also write the comparison as one self-contained HTML page")
    p.set_defaults(func=run)


def what_if_side(a, change: str):
    """(analysis of B, the what-if row) for A's what-if `change` (`top` = the best ranked one with a scenario)."""
    rows = [w for w in a.verdict.what_ifs if w.scenario is not None]
    if change == "top":
        ranked = [w for w in rows if w.status == "faster"]
        if not ranked:
            raise NarrowpathError("--what-if top: no what-if of A makes its step faster")
        w = ranked[0]
    else:
        known = {w.change: w for w in rows}
        if change not in known:
            others = [w.change for w in a.verdict.what_ifs if w.change not in known]
            why = ("it is one of A's what-ifs without a changed scenario (priced apart, or not applicable)"
                   if change in others else "it is not one of A's what-ifs")
            raise SpecError("--what-if", f"{change!r}: {why}; A's what-ifs with a changed scenario: "
                                         f"{', '.join(known) or 'none'}")
        w = known[change]
    scn = dataclasses.replace(w.scenario, name=f"{a.prediction.scenario.name} + {w.change}")
    same_device = scn.system.device == a.prediction.scenario.system.device
    pred = predict(scn, a.prediction.calibration if same_device else None)
    return analyze_prediction(pred, AnalysisOptions(what_ifs=False)), w


def run(args) -> int:
    check_html_file("--html", args.html)
    if (args.b is None) == (args.what_if is None):
        raise SpecError("B", "give either a second scenario B or --what-if ID (not both)")
    a = analyze_prediction(predict(load_any_scenario(args.a)), AnalysisOptions(what_ifs=args.what_if is not None))
    extra = {}
    if args.what_if:
        b, w = what_if_side(a, args.what_if)
        extra["what_if"] = {"change": w.change, "description": w.description, "kind": w.kind,
                            "repairs": list(w.repairs), "step_s": w.step_s}
    else:
        b = analyze_prediction(predict(load_any_scenario(args.b)), AnalysisOptions(what_ifs=False))
    c = compare(a, b)
    if args.html is not None:
        from narrowpath.report.html_compare import write_compare_html
        with writing("--html", args.html):
            write_compare_html(c, args.html)
    if args.json:
        print(json.dumps(comparison_to_json(c, extra), indent=2, allow_nan=False))
    else:
        print(format_comparison(c))
    return 0
