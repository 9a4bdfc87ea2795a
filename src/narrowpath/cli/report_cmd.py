"""`narrowpath report [SCENARIO|flags] -o report.html`: the analysis as one self-contained HTML page (no network
requests; plots as inline SVG) — prediction and error band, verdict and what-ifs, the five accounts, three budgets,
memory per stage, energy, the timeline and the validation evidence."""
from __future__ import annotations

import sys

from narrowpath.analysis import analyze_prediction
from narrowpath.cli.analyze_cmd import add_assumption_args, options_from_args
from narrowpath.cli.common import add_scenario_args, check_html_file, scenario_from_args, writing
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict


def register(sub) -> None:
    p = sub.add_parser("report", help="the analysis as one self-contained HTML page (default scenario if none)",
                       description="Write the analysis of a scenario as one self-contained HTML file: no network "
                                   "requests, inline SVG plots, readable on a phone and printable.")
    add_scenario_args(p)
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the HTML file to write")
    add_assumption_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    check_html_file("-o", args.output)
    options = options_from_args(args)
    a = analyze_prediction(predict(scenario_from_args(args)), options)
    from narrowpath.report.html_report import write_report
    with writing("-o", args.output):
        path = write_report(a, args.output)
    print(f"wrote {path}", file=sys.stderr)
    return 0
