"""`narrowpath trace TRACES`: the observed accounts of PyTorch profiler traces, optionally beside a prediction."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("trace", help="measure the accounts on PyTorch profiler (Kineto) traces",
                       description="Read Kineto traces (.json or .json.gz; files or a directory, one file per "
                                   "rank) and report temporal breakdown, overlap, collectives, kernels, idle "
                                   "gaps, critical path and stragglers.")
    p.add_argument("traces", nargs="+", metavar="TRACES", help="trace files or directories")
    p.add_argument("--against", metavar="SCENARIO",
                   help="scenario file or catalog id: put narrowpath's prediction beside the observation")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plots", metavar="DIR", help="write breakdown, busbw and straggler PNGs into DIR")
    p.add_argument("--timeline", metavar="FILE", help="write a filtered, annotated Chrome trace to FILE")
    p.add_argument("--step", type=int, help="ProfilerStep number whose critical path to report "
                                            "(default: the longest complete step)")
    p.set_defaults(func=run)


def run(args) -> int:
    from narrowpath.cli.common import (atomic_dir, atomic_file, check_output_dir, check_output_file, moved,
                                       refuse_inputs_as_outputs)
    from narrowpath.trace.analyze import analyze, report_to_dict
    from narrowpath.trace.reader import read_trace, trace_paths

    check_output_dir("--plots", args.plots)
    check_output_file("--timeline", args.timeline)
    inputs = [*args.traces, *trace_paths(args.traces), args.against]
    refuse_inputs_as_outputs({"--timeline": args.timeline}, [i for i in inputs if i and Path(i).exists()])
    trace = read_trace(args.traces)
    try:
        report = analyze(trace, critical_step=args.step)
    except KeyError:
        from narrowpath.errors import NarrowpathError
        raise NarrowpathError(f"--step {args.step}: no ProfilerStep#{args.step} in the trace") from None
    comparison = scenario_name = None
    if args.against:
        from narrowpath.catalog import load_scenario
        from narrowpath.schedule.step import predict
        from narrowpath.trace.compare import compare
        scenario = load_scenario(args.against)
        scenario_name = getattr(scenario, "name", args.against)
        comparison = compare(report, predict(scenario))
    written = []
    if args.plots:
        from narrowpath.report.trace_plots import write_plots
        with atomic_dir("--plots", args.plots) as tmp:
            written += [str(p) for p in moved(write_plots(report, str(tmp)), tmp, args.plots)]
    if args.timeline:
        from narrowpath.report.trace_timeline import write_timeline
        with atomic_file("--timeline", args.timeline) as tmp:
            write_timeline(trace, str(tmp))
        written.append(args.timeline)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        out = report_to_dict(report)
        if comparison is not None:
            from dataclasses import asdict
            from narrowpath.trace.analyze import json_safe
            out["against"] = {"scenario": scenario_name, **json_safe(asdict(comparison))}
        out["files_written"] = written
        print(json.dumps(out, indent=2))
        return 0
    from narrowpath.report.trace_tables import format_comparison, format_report
    print(format_report(report))
    if comparison is not None:
        print(format_comparison(comparison, scenario_name))
    return 0
