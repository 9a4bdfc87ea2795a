"""`narrowpath validate`: predicted vs measured step time on corpora of published runs, by regime and by ranking."""
from __future__ import annotations

import json
import shlex

from narrowpath.catalog.resolve import calibration_from
from narrowpath.report.console import table
from narrowpath.validate.run import run_validation
from narrowpath.cli.serve_validate import run_inference
from narrowpath.cli.collective_cmd import run_corpus
from narrowpath.errors import SpecError
from narrowpath.validate.corpus import corpus_schema
from narrowpath.report.collective_table import corpus_json, corpus_text

WORST_SHOWN = 15


def register(sub) -> None:
    p = sub.add_parser("validate", help="predicted vs measured step time on published runs",
                       description="Predict every case of the validation corpora (published training runs with "
                       "their hardware, model, plan and measured step time; default: every shipped corpus) and print "
                       "the errors by regime (hardware generation, precision, parallel family, source), how well "
                       "the model ranks the plans of each sweep, and the worst cases. Exit status 1 when any case "
                       "could not be priced (each says why), so CI can rely on it.")
    p.add_argument("--corpus", help="a validation-corpus/1 YAML/JSON file (default: every shipped training corpus: "
                   "training-public, training-sweeps-public, published-extra); an inference-corpus/1 or "
                   "collective-corpus/1 file is checked as `serve` and `collective --corpus` do")
    p.add_argument("--profile", help="calibration profile to use for every case instead of the per-device ones")
    p.add_argument("--cases", action="store_true", help=f"list every case (default: the {WORST_SHOWN} worst)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable output: cases (with the knobs the tool chose), groups, ranking")
    p.set_defaults(func=run)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}"


def run(args) -> int:
    cal = calibration_from(args.profile) if args.profile else None
    schema = corpus_schema(args.corpus) if args.corpus else None
    if schema == "inference-corpus/1":  # issue 13 (cli/serve_validate)
        return run_inference(args, cal)
    if schema == "collective-corpus/1":  # nccl-tests busbw: the same check as `collective --corpus`
        if args.profile:
            raise SpecError("--profile", "a collective corpus is priced with each device's own profile (as "
                            "`collective --corpus` does); leave it out")
        rows, source, failed = run_corpus(args.corpus, keep_going=True)
        print(json.dumps(corpus_json(rows, failed), indent=2, allow_nan=False) if args.json
              else corpus_text(rows, source, failed))
        return 1 if failed else 0
    rep = run_validation(args.corpus, cal)
    status = 1 if rep.num_failed else 0
    if args.json:
        print(json.dumps(rep.to_json(), indent=2, allow_nan=False))
        return status
    ok = sorted(rep.ok_cases, key=lambda c: -abs(c.error))
    shown = rep.ok_cases if args.cases else ok[:WORST_SHOWN]
    print(f"validation corpus: {rep.corpus}")
    rows = [[c.id, c.corpus, f"{c.predicted_step_time_s:.3f}", f"{c.measured_step_time_s:.3f}"
             + (" (d)" if c.derived else ""), f"{c.error * 100:+.1f}", f"{c.mfu * 100:.1f}"] for c in shown]
    title = "every case" if args.cases else f"the {len(shown)} largest errors (--cases lists all)"
    print(f"\n  {title}")
    print(table(["case", "corpus", "predicted (s)", "measured (s)", "error (%)", "MFU (%)"], rows))
    if any(c.derived for c in shown):
        print("  (d) measured time derived from the reported throughput (by the source, or by the tool from tokens/s/GPU)")
    print("\n  by regime")
    print(table(["kind", "group", "cases", "mean |error| (%)", "worst (%)"],
                [[g.kind, g.name, g.n, _pct(g.mean_abs_error), _pct(g.max_abs_error)] for g in rep.groups()]))
    r = rep.ranking
    if r is not None and r.sweeps:
        print(f"\n  ranking of plans: {r.sweeps} sweep groups, {r.pairs} pairs differing by > 3 %: order agreement "
              f"{_pct(r.order_agreement)} %; top-1 regret mean {_pct(r.top1_regret_mean)} %, worst "
              f"{_pct(r.top1_regret_max)} %")
    q = rep.repeatability
    if q is not None and q.groups:
        print(f"\n  the corpus against itself: {q.groups} configurations were measured more than once "
              f"({q.cases} cases); "
              f"their times differ by {_pct(q.median_spread)} % at the median, up to {_pct(q.max_spread)} % "
              f"({q.spreads[0][0]}). No predictor of the stated configuration can do better than mean |error| "
              f"{_pct(q.floor_mean_abs_error)} % and worst {_pct(q.floor_max_abs_error)} % over the corpus")
    lines = rep.flop_summary()
    if len(lines) > 1:
        print(f"\n  the stated model against its own measurement: {lines[0]}")
        for line in lines[1:]:
            print(f"    {line}")
    for c in rep.cases:
        if c.error is None:
            print(f"  FAILED {c.id}: {c.failure}")
    if rep.ok_cases:
        w = rep.worst
        print(f"\n  mean absolute error {rep.mean_abs_error * 100:.2f} %   worst {rep.max_abs_error * 100:.2f} % ({w.id})"
              f"   cases {len(rep.ok_cases)}/{len(rep.cases)}")
        if args.corpus:  # a case of the file is a scenario of every command (cli.common.load_any_scenario)
            print(f"  take one apart: narrowpath analyze {shlex.quote(f'{args.corpus}#{w.id}')}")
    else:
        print("\n  no case could be predicted")
    return status
