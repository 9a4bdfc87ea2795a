"""`narrowpath validate --corpus FILE` on an `inference-corpus/1` file: predicted vs measured serving figures per
case, grouped by regime, hardware generation, precision, model family and serving stack.

JSON contract (checked by scripts): `cases[{id, figures: {<measured key>: {predicted, measured, error}}, error}]`,
`mean_abs_error`, `max_abs_error` over all figures."""
from __future__ import annotations

import json

from narrowpath.report.console import table
from narrowpath.validate.inference import run_inference_validation

_UNITS = {"output_tokens_per_s": "tok/s", "total_tokens_per_s": "tok/s", "ttft_s": "s", "tpot_s": "s",
          "e2e_latency_s": "s"}


def run_inference(args, calibration=None) -> int:
    rep = run_inference_validation(args.corpus, calibration)
    if args.json:
        print(json.dumps(rep.to_json(), indent=2))
        return 0
    rows = []
    for c in rep.cases:
        if c.failure is not None:
            rows.append([c.id, "-", "-", "-", "FAILED"])
            continue
        for key, f in c.figures.items():
            rows.append([c.id, f"{key} ({_UNITS[key]})", f"{f.predicted:.4g}", f"{f.measured:.4g}",
                         f"{f.error * 100:+.1f}"])
    print(f"inference validation corpus: {rep.corpus}")
    print(table(["case", "figure", "predicted", "measured", "error (%)"], rows))
    for c in rep.cases:
        if c.failure is not None:
            print(f"  FAILED {c.id}: {c.failure}")
    for key, title in (("regime", "regime"), ("generation", "hardware generation"), ("precision", "weights"),
                       ("family", "model family"), ("stack", "serving stack")):
        g = rep.grouped(key)
        print(f"\n  by {title}:")
        print(table([title, "figures", "mean |error| (%)", "worst |error| (%)"],
                    [[k, v["figures"], v["mean_abs_error"] * 100, v["max_abs_error"] * 100] for k, v in g.items()]))
    ok = sum(1 for c in rep.cases if c.failure is None)
    print(f"\n  mean absolute error {rep.mean_abs_error * 100:.2f} %   worst {rep.max_abs_error * 100:.2f} %   "
          f"figures {len(rep.all_errors)}   cases {ok}/{len(rep.cases)}")
    return 0
