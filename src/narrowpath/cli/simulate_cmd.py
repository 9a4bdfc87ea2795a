"""`narrowpath simulate`: play training steps as events — exact pipeline schedules, collectives as rendezvous,
noise and faults — and report the step-time distribution, where the lost time went, and goodput.

Prices work with the same workload and cost stages as `predict`; without noise the simulated step equals
`predict` within 1 % (the difference is the exact schedule). Output: `--json` (the contract in
`report/simulation.py`), `--timeline FILE` (Perfetto trace of `--timeline-ranks`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from narrowpath.analysis.synchronisation import checkpoint_inputs
from narrowpath.catalog.resolve import read_data_file
from narrowpath.cli.common import add_scenario_args, check_output_file, comma_items, scenario_from_args, writing
from narrowpath.errors import SpecError
from narrowpath.network.placement import axis_strides
from narrowpath.report.simulation import format_simulation, simulation_to_json
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.programs import SCHEDULES
from narrowpath.spec.noise_parse import parse_noise

NOISE_HELP = """noise and faults, NAME=VALUE items separated by commas (repeatable), or a YAML/JSON file of the same
names: jitter=DIST:CV[:ALPHA] (per-kernel; DIST normal|lognormal|pareto, ALPHA the Pareto tail index);
slow-node=IDS:FRACTION, slow-gpu=IDS:FRACTION (IDS 3 or 3+17, 0-based; 0.2 = 20%% slower);
slow-link=TIER:FRACTION[:RANK]; link-flap=TIER:PROB[:PENALTY] (TIER scale_up|scale_out; per link and step);
gc|data-loader|checkpoint-io|interference=PERIOD:PAUSE[:aligned|random]; fail=CLASS:MTBF (CLASS
gpu|node|link|switch|software, per component, hours by default) or fail=llama3; detect=T restart=T
checkpoint-every=T horizon=T maintenance=T storage=BYTES_PER_S. Times take us|ms|s|min|h|d.
Example: --noise jitter=lognormal:0.05,slow-node=1:0.2,link-flap=scale_out:0.01 (docs/simulate.md)"""


def register(sub) -> None:
    p = sub.add_parser("simulate", help="play training steps as events: stragglers, noise, faults, goodput",
                       description="Play training steps as events from the same workload and cost model as predict: "
                                   "exact pipeline schedules, collectives as rendezvous, noise and faults; report the "
                                   "step-time distribution, the lost time by cause and goodput (docs/simulate.md).",
                       formatter_class=argparse.RawTextHelpFormatter)
    add_scenario_args(p)
    p.add_argument("--steps", type=int, default=20, help="steps to simulate (default 20)")
    p.add_argument("--noise", action="append", default=[], metavar="SPEC", help=NOISE_HELP)
    p.add_argument("--seed", type=int, default=0,
                   help="random seed (default 0; the same seed, --steps and --timeline give the same result bit for "
                        "bit: steps are drawn a batch at a time, and a --timeline run one at a time, so another "
                        "--steps or adding --timeline draws another sample of the same noise)")
    p.add_argument("--schedule", choices=("auto",) + SCHEDULES, default="auto",
                   help="pipeline schedule (default auto: the plan's, 1f1b or interleaved; zb-h1 needs vpp 1)")
    p.add_argument("--exact", action="store_true", help="draw kernel noise rank by rank (slower; default: fold the "
                                                        "tensor-parallel maxima of light-tailed noise)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeline", metavar="FILE", help="write a Perfetto/Chrome-trace JSON of the first two steps")
    p.add_argument("--timeline-ranks", metavar="R,R", help="ranks on the timeline (default: 0 and the first rank "
                                                           "of the last pipeline stage)")
    p.set_defaults(func=run)


def noise_from_args(values: list[str]):
    """Each --noise value is a spec string or a YAML/JSON file of the same names."""
    parts = []
    for v in values:
        path = Path(v)
        if path.suffix.lower() in (".yaml", ".yml", ".json") or path.is_file():
            if not path.is_file():
                raise SpecError("--noise", f"{v}: no such file")
            parts.append(read_data_file(path))
        else:
            parts.append(v)
    return parse_noise(parts)


def _ranks(text: str | None, scn) -> tuple[int, ...]:
    if text is None:  # rank 0 and the first rank of the last stage, wherever the placement puts the pp axis
        return tuple(sorted({0, (scn.plan.pp - 1) * axis_strides(scn.plan)["pp"]}))
    try:
        ranks = tuple(int(x) for x in comma_items(text))
    except ValueError:
        raise SpecError("--timeline-ranks", f"expected comma-separated ranks, got {text!r}") from None
    if not ranks:
        raise SpecError("--timeline-ranks", f"expected comma-separated ranks, got {text!r}")
    return tuple(dict.fromkeys(ranks))  # each rank once, in the order given


def run(args) -> int:
    check_output_file("--timeline", args.timeline)
    if args.timeline_ranks is not None and not args.timeline:
        raise SpecError("--timeline-ranks", "only chooses the ranks of a --timeline FILE: give one")
    if args.steps < 1:
        raise SpecError("--steps", f"must be >= 1, got {args.steps}")
    noise = noise_from_args(args.noise)
    if args.schedule in ("dualpipe", "dualpipev") and getattr(args, "pipeline_schedule", None) is None:
        args.pipeline_schedule = args.schedule  # the plan that runs it, built as such (its vpp checked once)
    scn = scenario_from_args(args)
    ranks = _ranks(args.timeline_ranks, scn) if args.timeline else ()
    r = simulate(scn, noise, steps=args.steps, seed=args.seed,
                 schedule=None if args.schedule == "auto" else args.schedule, exact=args.exact,
                 timeline_ranks=ranks, checkpoint=checkpoint_inputs)
    if args.timeline:
        from narrowpath.report.sim_timeline import write_sim_timeline
        with writing("--timeline", args.timeline):
            write_sim_timeline(r, args.timeline)
    print(json.dumps(simulation_to_json(r), indent=2) if args.json else format_simulation(r))
    return 0
