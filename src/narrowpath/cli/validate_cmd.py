"""`narrowpath validate`: predicted vs measured step time on a corpus of published runs."""
from __future__ import annotations

import json

from narrowpath.catalog.resolve import calibration_from
from narrowpath.report.console import table
from narrowpath.validate.run import run_validation


def register(sub) -> None:
    p = sub.add_parser("validate", help="predicted vs measured step time on published runs",
                       description="Predict every case of a validation corpus (published training runs with their "
                       "hardware, model, plan and measured step time) and print predicted vs measured, the error "
                       "of each case and the mean absolute error.")
    p.add_argument("--corpus", help="a validation-corpus/1 YAML/JSON file (default: the shipped public corpus)")
    p.add_argument("--profile", help="calibration profile to use for every case instead of the per-device ones")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    cal = calibration_from(args.profile) if args.profile else None
    rep = run_validation(args.corpus, cal)
    if args.json:
        print(json.dumps(rep.to_json(), indent=2))
        return 0
    rows = []
    for c in rep.cases:
        if c.error is None:
            measured = "-" if c.measured_step_time_s is None else f"{c.measured_step_time_s:.3f}"
            rows.append([c.id, "-", measured, "FAILED", "-"])
        else:
            rows.append([c.id, f"{c.predicted_step_time_s:.3f}", f"{c.measured_step_time_s:.3f}"
                         + (" (d)" if c.derived else ""), f"{c.error * 100:+.1f}", f"{c.mfu * 100:.1f}"])
    print(f"validation corpus: {rep.corpus}")
    print(table(["case", "predicted (s)", "measured (s)", "error (%)", "MFU (%)"], rows))
    for c in rep.cases:
        if c.error is None:
            print(f"  FAILED {c.id}: {c.failure}")
    if rep.ok_cases:
        w = rep.worst
        if any(c.derived for c in rep.ok_cases):
            print("  (d) measured time derived by the source from its reported throughput")
        print(f"\n  mean absolute error {rep.mean_abs_error * 100:.2f} %   worst {rep.max_abs_error * 100:.2f} % ({w.id})"
              f"   cases {len(rep.ok_cases)}/{len(rep.cases)}")
    else:
        print("\n  no case could be predicted")
    return 0
