"""`narrowpath search`: the best parallel plans for a model on a system at a fixed GPU count and global batch.

With a scenario (a file, a catalog id, or the default), a plan flag such as `--tp 4` pins that knob of the search;
it does not rewrite the scenario's own plan, which keeps its GPU count and is ranked as it is (priced apart when
the pins exclude it). Built from `--model/--system` alone, the flags are the user's plan and pin the search too.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from narrowpath.cli.common import add_scenario_args, scenario_from_args
from narrowpath.cli.serve_search import add_serve_search_args, run_serve_search
from narrowpath.errors import SpecError
from narrowpath.report.search_table import format_search, search_to_json
from narrowpath.search import KNOBS, OBJECTIVES, SearchSpace, candidate_plans, search
from narrowpath.search.rank import usable_cpus

_FLAG = {"zero_stage": "--zero", "sequence_parallel": "--sp/--no-sp"}


def register(sub) -> None:
    p = sub.add_parser("search", help="rank every consistent parallel plan of a scenario by the step model",
                       description="Rank the parallel plans (tp, pp, vpp, cp, ep, dp, micro-batch, ZeRO stage, "
                       "recompute, sequence parallelism) for the scenario's model, system, GPU count and global "
                       "batch. A plan flag (e.g. --tp 8) pins that knob; the scenario's own plan is ranked too.")
    add_scenario_args(p)
    p.add_argument("--objective", choices=OBJECTIVES, default="time",
                   help="rank by step time (default), energy per step, or memory per GPU")
    p.add_argument("--top", type=int, default=10, help="plans to show (default 10)")
    p.add_argument("--min-free-gb", dest="min_free_gb", type=float, default=0.0,
                   help="count a plan as fitting only if it leaves this much device memory free per GPU, GB "
                   "(default 0; the memory model already holds a runtime reserve)")
    p.add_argument("--max-plans", dest="max_plans", type=int, default=200_000,
                   help="refuse a space larger than this (default 200,000)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes pricing the plans, at most one per "
                   "usable CPU (default: one per usable CPU)")
    p.add_argument("--max-minutes", dest="max_minutes", type=float, default=10.0,
                   help="refuse, before pricing, a space estimated to take longer than this (default 10; a few plans "
                   "are timed first); a search over 10 s says so and prints progress on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_serve_search_args(p)  # issue 13: `search --serve` (cli/serve_search.py)
    p.set_defaults(func=run)


def _flag(knob: str) -> str:
    return _FLAG.get(knob, f"--{knob}")


def _pins_and_base(args):
    """(pins, base scenario): the knob flags become pins; with a scenario they leave its own plan untouched."""
    pinned = {k: getattr(args, k) for k in KNOBS + ("dp",) if getattr(args, k, None) is not None}
    from_scenario = getattr(args, "scenario", None) is not None or not (args.model or args.system)
    if not from_scenario:
        return pinned, scenario_from_args(args)
    plain = argparse.Namespace(**vars(args))
    for k in pinned:
        setattr(plain, k, None)
    return pinned, scenario_from_args(plain)


def _no_plan_error(space: SearchSpace) -> SpecError:
    """Why the space is empty: the pins that alone leave no consistent plan, or all of them together."""
    culprits = [k for k, v in space.pinned.items()
                if next(candidate_plans(SearchSpace(space.model, space.system, space.num_gpus, space.gbs,
                                                    space.base, {k: v})), None) is None]
    names = culprits or list(space.pinned)
    what = ", ".join(f"{_flag(k)} {space.pinned[k]}" for k in names)
    return SpecError(_flag(names[0]) if len(names) == 1 else "search",
                     f"no consistent plan of {space.model.name} on {space.num_gpus} GPUs with a global batch of "
                     f"{space.gbs} has {what} (tp must divide heads and ffn, pp·vpp fit the layers, cp the sequence, "
                     f"dp·mbs the batch; ep needs an MoE model and must divide dp and the experts; tp above the "
                     f"scale-up domain must span whole domains)")


def run(args) -> int:
    if args.top < 1:
        raise SpecError("--top", f"must be >= 1, got {args.top}")
    if not args.min_free_gb >= 0:
        raise SpecError("--min-free-gb", f"must be >= 0, got {args.min_free_gb}")
    if args.jobs is None:
        args.jobs = usable_cpus()
    if args.jobs < 1:
        raise SpecError("--jobs", f"must be >= 1, got {args.jobs}")
    if args.max_plans < 1:
        raise SpecError("--max-plans", f"must be >= 1, got {args.max_plans}")
    if not (math.isfinite(args.max_minutes) and args.max_minutes > 0):
        raise SpecError("--max-minutes", f"must be a finite number > 0, got {args.max_minutes}")
    if args.serve:  # issue 13: serving plans under latency SLOs
        return run_serve_search(args)
    if getattr(args, "scenario", None) is None and (args.model or args.system) and args.gbs is None:
        raise SpecError("--gbs", "a search from --model/--system needs the global batch: give --gbs (sequences "
                        "per step)")
    pinned, base = _pins_and_base(args)
    space = SearchSpace(base.model, base.system, base.num_gpus, base.plan.gbs, base.plan, pinned)
    if pinned and next(candidate_plans(space), None) is None:
        raise _no_plan_error(space)
    result = search(base, space, objective=args.objective, top=args.top, max_plans=args.max_plans,
                    min_free_bytes=args.min_free_gb * 1e9, jobs=args.jobs, max_seconds=args.max_minutes * 60,
                    progress=lambda line: print(line, file=sys.stderr, flush=True))
    if not result.ranked:
        why = f"; first failure: {result.first_failure}" if result.first_failure else ""
        free = f" with {args.min_free_gb:g} GB free" if args.min_free_gb else ""
        raise SpecError("search", f"none of the {result.num_plans:,} plans fits in "
                        f"{base.system.device.hbm.capacity_bytes / 1e9:.1f} GB per GPU{free}{why}")
    if args.json:
        print(json.dumps(search_to_json(result, args.top), indent=2))
    else:
        print(format_search(result, args.top))
    return 0
