"""`narrowpath predict`: one training step's time, breakdown, MFU/HFU, memory per rank."""
from __future__ import annotations

import json

from narrowpath.cli.common import add_scenario_args, scenario_from_args
from narrowpath.report.prediction import format_prediction, prediction_to_json
from narrowpath.schedule.step import predict


def register(sub) -> None:
    p = sub.add_parser("predict", help="predict one training step of a scenario",
                       description="Predict one training step of a scenario (a file, a catalog id, or --model/"
                       "--system flags): step time and its breakdown, MFU/HFU, tokens/s, memory per rank (and "
                       "whether it fits), the collectives per step and the assumptions behind the numbers.")
    add_scenario_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    pred = predict(scenario_from_args(args))
    if args.json:
        print(json.dumps(prediction_to_json(pred), indent=2))
    else:
        print(format_prediction(pred))
    return 0
