"""`narrowpath sweep GRID -o DIR`: a design-space sweep (systems x models x GPU counts x batches x objectives),
one search per cell, on a Dask cluster: a local one by default, `--scheduler ADDRESS` for a running one.

DIR receives `rows.jsonl` (one row per finished cell, written as each finishes: `--resume` after a kill skips
them), `summary.txt` (the table printed) and `sweep.png` (best tokens/s per GPU and per watt per cell).
Ctrl-C and SIGTERM stop the cluster and exit 130 / 143, keeping the rows written so far.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

OUTPUTS = ("rows.jsonl", "summary.txt", "sweep.png")


def register(sub) -> None:
    p = sub.add_parser("sweep", help="design-space sweep: systems x models x GPU counts x batches, one search per "
                                     "cell, on a Dask cluster",
                       description="Run one search per cell of GRID (a YAML/JSON file with systems, models, "
                                   "num_gpus, gbs and objective lists) on a Dask cluster; write each cell's best "
                                   "plan to DIR/rows.jsonl as it finishes, then a summary table and a plot.")
    p.add_argument("grid", metavar="GRID", help="grid file (YAML or JSON): systems, models, num_gpus, gbs, objective")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory (rows.jsonl, summary.txt, "
                                                                        "sweep.png)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler of a running cluster, e.g. "
                                                          "tcp://10.0.0.1:8786 (default: a local cluster)")
    p.add_argument("--workers", type=int, help="worker processes of the local cluster (default: one per usable CPU)")
    p.add_argument("--resume", action="store_true", help="continue a sweep in DIR: cells already in rows.jsonl are "
                                                         "not searched again")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _check_paths(args) -> None:
    """Fail before any work on an unusable DIR, or one whose outputs would overwrite the grid file."""
    from narrowpath.cli.common import check_output_dir, refuse_inputs_as_outputs
    check_output_dir("-o", args.output)
    for name in OUTPUTS:
        refuse_inputs_as_outputs({"-o": os.path.join(args.output, name)}, [args.grid])


def run(args) -> int:
    from narrowpath.cli.main import Terminated
    from narrowpath.errors import SpecError
    if args.workers is not None and args.workers < 1:
        raise SpecError("--workers", f"must be >= 1, got {args.workers}")
    if args.workers is not None and args.scheduler:
        raise SpecError("--workers", "sizes the local cluster only; a --scheduler cluster brings its own workers")
    _check_paths(args)
    from narrowpath.cli.progress import Progress
    from narrowpath.search.grid import load_grid
    from narrowpath.search.rank import usable_cpus
    from narrowpath.search.sweep import ROWS_FILE, run_sweep
    grid = load_grid(args.grid)
    workers = args.workers or usable_cpus()
    bar = Progress(grid.num_cells, label="sweep", unit="cells", enabled=args.progress)
    try:
        outcome = run_sweep(grid, args.output, scheduler=args.scheduler, workers=workers, resume=args.resume,
                            on_row=lambda row, done, total: bar.update(done))
    except (KeyboardInterrupt, Terminated) as stop:  # the cluster is closed by now (run_sweep's finally)
        bar.close()
        what = "interrupted" if isinstance(stop, KeyboardInterrupt) else "terminated"
        print(f"narrowpath: sweep {what}; the finished cells are in {Path(args.output) / ROWS_FILE}: add --resume "
              f"to continue", file=sys.stderr)
        return 130 if isinstance(stop, KeyboardInterrupt) else 143
    bar.close()
    return _report(outcome, args)


def _report(outcome, args) -> int:
    from narrowpath.cli.common import atomic_write_text, writing
    from narrowpath.report.sweep_table import format_sweep, sweep_to_json
    rows = list(outcome.rows)
    text = format_sweep(rows, num_reused=outcome.num_reused, num_computed=outcome.num_computed,
                        rows_path=str(outcome.rows_path))
    out = Path(args.output)
    written = [str(outcome.rows_path)]
    written.append(str(atomic_write_text("-o", out / "summary.txt", text + "\n")))
    note = None
    if importlib.util.find_spec("matplotlib") is None:  # the rows and the table stand without the plot
        note = "no plot: matplotlib is not installed (pip install 'narrowpath[sweep]')"
    else:
        from narrowpath.report.sweep_plots import plot_sweep
        with writing("-o"):
            written.append(str(plot_sweep(rows, str(out / "sweep.png"))))
    if args.json:
        print(json.dumps(sweep_to_json(rows, num_reused=outcome.num_reused, rows_path=str(outcome.rows_path),
                                       files_written=written), indent=2))
    else:
        print(text)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if note:
        print(f"narrowpath: {note}", file=sys.stderr)
    return 0
