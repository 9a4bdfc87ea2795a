"""`narrowpath trace TRACES`: the observed accounts of PyTorch profiler traces, optionally beside a prediction."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("trace", help="measure the accounts on PyTorch profiler (Kineto) traces",
                       description="Read Kineto traces (.json or .json.gz; files or a directory, one file per "
                                   "rank) and report temporal breakdown, overlap, collectives, kernels, idle "
                                   "gaps, critical path and stragglers.")
    p.add_argument("traces", nargs="+", metavar="TRACES", help="trace files or directories (files of several jobs "
                                                               "are grouped by job and each job is analysed)")
    p.add_argument("--against", metavar="SCENARIO",
                   help="scenario file or catalog id: put narrowpath's prediction beside the observation")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plots", metavar="DIR", help="write breakdown, busbw and straggler PNGs into DIR (DIR/jobN/ "
                                                  "when the traces hold several jobs)")
    p.add_argument("--timeline", metavar="FILE", help="write a filtered, annotated Chrome trace to FILE")
    p.add_argument("--step", type=int, help="ProfilerStep number whose critical path to report "
                                            "(default: the longest complete step); one job's traces only")
    p.set_defaults(func=run)


NO_BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}
"""Set (unless the user set them) before numpy loads: the trace analyses do no linear algebra, and OpenBLAS
starting a thread per core when numpy is imported took 30 of numpy's 65 ms import on the 2-core machine."""


def run(args) -> int:
    for key, value in NO_BLAS_THREADS.items():
        os.environ.setdefault(key, value)
    from narrowpath.cli.common import check_output_dir, check_output_file, refuse_inputs_as_outputs
    from narrowpath.trace.reader import read_jobs, trace_paths

    check_output_dir("--plots", args.plots)
    check_output_file("--timeline", args.timeline)
    inputs = [*args.traces, *trace_paths(args.traces), args.against]
    refuse_inputs_as_outputs({"--timeline": args.timeline}, [i for i in inputs if i and Path(i).exists()])
    jobs = read_jobs(args.traces)
    if len(jobs) > 1:
        from narrowpath.trace.jobs import describe_job
        which = "; ".join(f"job {i}: {describe_job(j)}" for i, j in enumerate(jobs, 1))
        from narrowpath.errors import NarrowpathError
        for flag in ("against", "timeline"):
            if getattr(args, flag):
                raise NarrowpathError(f"--{flag}: the traces hold {len(jobs)} jobs ({which}); give the files of one "
                                      "job")
        if args.step is not None:  # a step number is one job's: refused like the other one-job flags
            from narrowpath.trace.analyze import has_step
            having = [str(i) for i, j in enumerate(jobs, 1) if has_step(j, args.step)]
            where = f"job {', '.join(having)} has it" if len(having) == 1 else (
                f"jobs {', '.join(having)} have it" if having else "no job has it")
            raise NarrowpathError(f"--step {args.step}: the traces hold {len(jobs)} jobs ({which}); ProfilerStep#"
                                  f"{args.step}: {where}; give the files of one job")
    results = [_analyse(trace, args, i if len(jobs) > 1 else None) for i, trace in enumerate(jobs, 1)]
    written = [p for r in results for p in r[2]]
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        if len(results) == 1:
            out = results[0][1]
        else:
            from narrowpath.trace.analyze import JSON_SCHEMA_VERSION
            out = {"schema_version": JSON_SCHEMA_VERSION, "jobs": [r[1] for r in results]}
        out["files_written"] = written
        print(json.dumps(out, indent=2))
        return 0
    print("\n\n".join(r[0] for r in results))
    return 0


def _analyse(trace, args, job: int | None):
    """(text, JSON object, files written) of one job; `job` numbers it when the traces hold several."""
    from narrowpath.cli.common import atomic_dir, atomic_file, moved
    from narrowpath.trace.analyze import analyze, report_to_dict
    try:
        report = analyze(trace, critical_step=args.step)
    except KeyError:  # one job only (several are refused in run)
        from narrowpath.errors import NarrowpathError
        from narrowpath.trace.windows import steps
        have = sorted(set.intersection(*({w.step for w in steps(r)} for r in trace.ranks)))
        listed = ", ".join(map(str, have[:12])) + (", ..." if len(have) > 12 else "") if have else "none"
        raise NarrowpathError(f"--step {args.step}: no ProfilerStep#{args.step} on every rank of the trace "
                              f"(steps there: {listed})") from None
    comparison = scenario_name = None
    if args.against:
        from narrowpath.cli.common import load_any_scenario
        from narrowpath.schedule.step import predict
        from narrowpath.trace.compare import compare
        scenario = load_any_scenario(args.against)
        scenario_name = getattr(scenario, "name", args.against)
        comparison = compare(report, predict(scenario))
    written = []
    if args.plots:
        from narrowpath.report.trace_plots import write_plots
        target = args.plots if job is None else os.path.join(args.plots, f"job{job}")
        with atomic_dir("--plots", target) as tmp:
            written += [str(p) for p in moved(write_plots(report, str(tmp)), tmp, target)]
    if args.timeline:
        from narrowpath.report.trace_timeline import write_timeline
        with atomic_file("--timeline", args.timeline) as tmp:
            write_timeline(trace, str(tmp))
        written.append(args.timeline)
    if args.json:
        data = report_to_dict(report)
        if job is not None:
            from narrowpath.trace.jobs import describe_job
            data = {"job": job, "description": describe_job(trace), "files": [r.path for r in trace.ranks], **data}
            data.pop("schema_version")
        if comparison is not None:
            from dataclasses import asdict
            from narrowpath.trace.analyze import json_safe
            data["against"] = {"scenario": scenario_name, **json_safe(asdict(comparison))}
        return None, data, written
    from narrowpath.report.trace_tables import format_comparison, format_report
    text = format_report(report)
    if job is not None:
        from narrowpath.trace.jobs import describe_job
        text = f"=== job {job}: {describe_job(trace)} ===\n{text}"
    if comparison is not None:
        text += "\n" + format_comparison(comparison, scenario_name)
    return text, None, written
