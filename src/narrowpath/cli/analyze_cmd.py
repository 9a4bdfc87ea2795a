"""`narrowpath analyze`: where the time goes — prediction, the five accounts, three budgets, verdict and energy.

Default scenario: the embedded one. `--json` emits `prediction` plus one key per account and budget;
`--plots DIR` writes PNGs; `--timeline FILE` writes a Chrome-trace JSON of one step (open it in Perfetto).
"""
from __future__ import annotations

import json
import sys

from narrowpath.analysis import AnalysisOptions, analyze_prediction
from narrowpath.analysis.options import in_range
from narrowpath.cli.common import (add_scenario_args, atomic_dir, atomic_write_text, check_output_dir,
                                   check_html_file, check_output_file, moved, refuse_inputs_as_outputs,
                                   scenario_from_args, scenario_inputs)
from narrowpath.errors import SpecError
from narrowpath.report.analysis_console import format_analysis
from narrowpath.report.analysis_json import analysis_to_json
from narrowpath.report.prediction import prediction_to_json
from narrowpath.schedule.step import predict


def register(sub) -> None:
    p = sub.add_parser("analyze", help="where the time goes: accounts, budgets, verdict with what-ifs, energy "
                                       "(default scenario if none)",
                       description="Where the time goes in one training step: the prediction, the five accounts "
                       "(bytes per useful FLOP, collectives, overlap, topology fit, scaling), the distance, "
                       "communication and synchronisation budgets, a verdict with what-if gains, and energy.")
    add_scenario_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    p.add_argument("--timeline", metavar="FILE", help="write a Chrome-trace JSON of one step")
    p.add_argument("--html", metavar="FILE", help="write the analysis as one self-contained HTML page")
    add_assumption_args(p)
    p.set_defaults(func=run)


def add_assumption_args(p) -> None:
    """The analysis assumptions (shared by `analyze` and `report`)."""
    a = p.add_argument_group("analysis assumptions")
    a.add_argument("--jitter-cv", type=float, default=0.02,
                   help="per-rank compute jitter, std / segment time (0 to 1; default 0.02)")
    a.add_argument("--jitter-method", choices=("closed_form", "sampled"), default="closed_form",
                   help="expected wait for the slowest rank: closed_form (extreme-value approximation, the "
                        "default) or sampled (seeded Monte Carlo, see --seed)")
    a.add_argument("--seed", type=int, default=0, help="seed for sampled jitter (default 0)")
    a.add_argument("--slow-node", type=float, default=10.0, metavar="PERCENT",
                   help="percent by which one node is slower than the others (0 to 1000; default 10)")
    a.add_argument("--compression", type=float, default=4.0,
                   help="gradient compression ratio for the what-if (>= 1; default 4)")
    a.add_argument("--failures-per-gpu-hour", type=float, default=None,
                   help="interruptions per GPU-hour for the failure budget (default 1.97e-5: Llama 3's 419 in "
                        "54 days on 16,384 H100)")
    a.add_argument("--no-what-ifs", dest="what_ifs", action="store_false",
                   help="skip the what-if re-runs (default: run them)")
    a.add_argument("--no-simulate", dest="simulate", action="store_false",
                   help="skip the step simulator's synchronisation numbers (default: play the budget's jitter and "
                        "slow node on it too)")


_FLAG = {"options.jitter_cv": "--jitter-cv", "options.slow_node_fraction": "--slow-node",
         "options.compression_ratio": "--compression", "options.failures_per_gpu_hour": "--failures-per-gpu-hour",
         "options.seed": "--seed", "options.jitter_method": "--jitter-method"}


def options_from_args(args) -> AnalysisOptions:
    """The analysis options of the flags; AnalysisOptions checks the ranges, reported here under the flag names."""
    in_range("--slow-node", args.slow_node, 0.0, 1000.0)  # percent here, a fraction in AnalysisOptions
    kw = dict(jitter_cv=args.jitter_cv, jitter_method=args.jitter_method, seed=args.seed,
              slow_node_fraction=args.slow_node / 100.0, compression_ratio=args.compression, what_ifs=args.what_ifs,
              simulate=getattr(args, "simulate", True))
    if args.failures_per_gpu_hour is not None:
        kw["failures_per_gpu_hour"] = args.failures_per_gpu_hour
    try:
        return AnalysisOptions(**kw)
    except SpecError as exc:
        raise SpecError(_FLAG.get(exc.field, exc.field), exc.detail) from None


def check_output_paths(args) -> None:
    """Fail before any work when --plots names a file or --timeline a directory, a parent is not writable, or
    --timeline is one of the inputs (the scenario file, --model config.json, --profile, or a file they name)."""
    check_output_dir("--plots", args.plots)
    check_output_file("--timeline", args.timeline)
    check_html_file("--html", args.html)
    refuse_inputs_as_outputs({"--timeline": args.timeline, "--html": args.html}, scenario_inputs(args))


def write_outputs(a, args) -> None:
    """Write the plots and the timeline (each file atomically) and say on stderr where they went."""
    if args.plots:
        from narrowpath.report.plots import write_plots
        with atomic_dir("--plots", args.plots) as tmp:
            paths = moved(write_plots(a, str(tmp)), tmp, args.plots)
        print(f"wrote {len(paths)} plots: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if args.timeline:
        from narrowpath.report.timeline import aggregation_note, timeline_document
        doc = timeline_document(a)
        atomic_write_text("--timeline", args.timeline, json.dumps(doc))
        note = aggregation_note(doc)
        print(f"wrote timeline {args.timeline}" + (f" ({note})" if note else ""), file=sys.stderr)
    if args.html is not None:
        from narrowpath.report.html_report import report_html
        atomic_write_text("--html", args.html, report_html(a))
        print(f"wrote report {args.html}", file=sys.stderr)


def run(args) -> int:
    check_output_paths(args)
    options = options_from_args(args)
    pred = predict(scenario_from_args(args))
    a = analyze_prediction(pred, options)
    write_outputs(a, args)
    if args.json:
        print(json.dumps({"prediction": prediction_to_json(pred), **analysis_to_json(a)}, indent=2))
    else:
        print(format_analysis(a))
    return 0
