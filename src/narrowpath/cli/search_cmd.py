"""`narrowpath search`: the best parallel plans for a model on a system at a fixed GPU count and global batch.

With a scenario (a file, a catalog id, or the default), a plan flag such as `--tp 4` pins that knob of the search;
it does not rewrite the scenario's own plan, which keeps its GPU count and is ranked as it is (priced apart when
the pins exclude it). Built from `--model/--system` alone, the flags are the user's plan and pin the search too.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from narrowpath.cli.common import add_scenario_args, check_least, comma_items, scenario_from_args
from narrowpath.cli.serve_search import add_serve_search_args, run_serve_search
from narrowpath.errors import SpecError
from narrowpath.report.prediction import memory_warning
from narrowpath.report.search_table import SHOWN_PER_ROW, format_search, search_to_json
from narrowpath.schedule.step import predict
from narrowpath.search import KNOBS, OBJECTIVES, SearchSpace, candidate_plans, search
from narrowpath.search.each import leaves_free, space_scenario
from narrowpath.search.rank import MAX_PLANS, RANK_LIMIT, usable_cpus
from narrowpath.search.space import EXTENTS
from narrowpath.search.table import build_table
from narrowpath.spec._check import choice
from narrowpath.spec.plan import AXES, EP_DISPATCH, RECOMPUTE_MODULES, SPLIT_DEFAULTS
from narrowpath.spec.scenario import consistency_errors

_FLAG = {"zero_stage": "--zero", "sequence_parallel": "--sp/--no-sp", "bucket_bytes": "--bucket-mb",
         "recompute_modules": "--recompute-modules",
         "dp_overlap": "--dp-overlap/--no-dp-overlap", "tp_comm_overlap": "--tp-comm-overlap/--no-tp-comm-overlap",
         "ep_overlap": "--ep-overlap/--no-ep-overlap", "recompute_layers": "--recompute-layers",
         "offload_layers": "--offload-layers", "ep_dispatch": "--ep-dispatch"}
_SEARCH_ONLY = ("etp", "ep_dispatch", "ep_overlap", "recompute_layers", "offload_layers", "bucket_bytes", "placement")
"""Knobs only `search` has flags for (they pin the search; built from --model/--system they are your plan too)."""


def register(sub) -> None:
    p = sub.add_parser("search", help="rank every consistent parallel plan of a scenario by the step model",
                       description="Rank the parallel plans (tp, pp, vpp, cp, ep, etp, dp, micro-batch, ZeRO stage, "
                       "recompute incl. partial and activation offload, sequence parallelism, overlap switches, "
                       "bucket size, CP exchange, expert dispatch, placement order) for the scenario's model, "
                       "system, GPU count and global batch, priced in bulk with exactly predict's numbers. A plan "
                       "flag (e.g. --tp 8) pins that knob; the scenario's own plan is ranked too.")
    add_scenario_args(p)
    g = p.add_argument_group("search knobs (pin the search)")
    g.add_argument("--space", dest="extent", choices=EXTENTS, default="full",
                   help="full: every knob the model prices (default); basic: tp, pp, vpp <= 8, cp, ep, mbs, ZeRO, "
                   "recompute and sp only, the rest kept from the scenario")
    g.add_argument("--etp", type=int, help="expert tensor-parallel size (0 = tp)")
    g.add_argument("--ep-dispatch", dest="ep_dispatch", choices=EP_DISPATCH, help="MoE dispatch")
    g.add_argument("--ep-overlap", dest="ep_overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap the MoE all-to-all with another micro-batch's compute")
    g.add_argument("--recompute-layers", dest="recompute_layers", type=int,
                   help="with --recompute full: layers of each pipeline chunk recomputed (0 = all)")
    g.add_argument("--offload-layers", dest="offload_layers", type=int,
                   help="layers of each pipeline chunk whose activations are offloaded to host memory")
    g.add_argument("--bucket-mb", dest="bucket_mb", type=float, help="gradient bucket size, MB")
    g.add_argument("--placement", help="rank order of the parallel axes, fastest first, e.g. tp,cp,dp,pp")
    p.add_argument("--objective", choices=OBJECTIVES, default="time",
                   help="rank by step time (default), energy per step, or memory per GPU")
    p.add_argument("--top", type=int, default=10, help="plans to show (default 10)")
    p.add_argument("--min-free-gb", dest="min_free_gb", type=float, default=0.0,
                   help="count a plan as fitting only if it leaves this much device memory free per GPU, GB "
                   "(default 0; the memory model already holds a runtime reserve)")
    p.add_argument("--max-plans", dest="max_plans", type=int, default=MAX_PLANS,
                   help=f"refuse a space larger than this (default {MAX_PLANS:.0e}; the space is counted without "
                   "building its plans)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes laying out placements, computing "
                   "energy ledgers or pricing a recurrent model's plans, at most one per usable CPU (default: one "
                   "per usable CPU)")
    p.add_argument("--max-minutes", dest="max_minutes", type=float, default=10.0,
                   help="refuse a search whose placements or energy ledgers are estimated to take longer than this "
                   "(default 10; a few are timed first); a search over 10 s says so and prints progress on stderr")
    p.add_argument("--rank-limit", dest="rank_limit", type=int, default=RANK_LIMIT,
                   help=f"count at most this many plans faster than your own (default {RANK_LIMIT:,}; a ranking by "
                   "time then says yours ranks beyond that place and looks only for the best plans, which is much "
                   "faster on a large space); 0 counts them all for its exact rank")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_serve_search_args(p)  # issue 13: `search --serve` (cli/serve_search.py)
    p.set_defaults(func=run, flag_defaults={a.dest: (a.default, a.option_strings[0]) for a in p._actions
                                            if a.option_strings and a.dest != "help"})


def _flag(knob: str) -> str:
    return _FLAG.get(knob, f"--{knob}")


def _placement(text: str) -> tuple[str, ...]:
    """--placement tp,cp,dp,pp (fastest first); `ep` may be left out (it is not a layout axis: placement.py)."""
    axes = comma_items(text)
    if "ep" not in axes and "dp" in axes:
        axes = axes[:axes.index("dp")] + ("ep",) + axes[axes.index("dp"):]
    if sorted(axes) != sorted(AXES):
        raise SpecError("--placement", f"must order the axes {', '.join(a for a in AXES if a != 'ep')} (and "
                        f"optionally ep), fastest first; got {text!r}")
    return axes


def _pins_and_base(args):
    """(pins, base scenario, GPUs, global batch): the knob flags become pins; with a scenario they leave its own plan
    untouched. A --gpus / --gbs its plan (or, from --model/--system, the plan the flags give) cannot take is the
    space's all the same: that plan is then built at its own size and not ranked."""
    if args.gbs is not None and args.gbs < 1:  # as predict refuses them (a 0 here was taken as "not given")
        raise SpecError("--gbs", f"must be >= 1, got {args.gbs}")
    if args.gpus is not None and args.gpus < 1:
        raise SpecError("--gpus", f"must be >= 1, got {args.gpus}")
    pinned, base = _pins_and_plan(args)
    try:
        base = base()
    except SpecError:
        if args.gpus is None and args.gbs is None:
            raise
        own_size = argparse.Namespace(**{**vars(args), "gpus": None, "gbs": None})
        base = _pins_and_plan(own_size)[1]()
        return (pinned, base, base.num_gpus if args.gpus is None else args.gpus,
                base.plan.gbs if args.gbs is None else args.gbs)
    return pinned, base, base.num_gpus, base.plan.gbs


def _pins_and_plan(args):
    """(pins, a function building the base scenario) — see _pins_and_base."""
    if getattr(args, "bucket_mb", None) is not None:
        if not (math.isfinite(args.bucket_mb) and args.bucket_mb > 0):
            raise SpecError("--bucket-mb", f"must be a finite number > 0, got {args.bucket_mb}")
        args.bucket_bytes = args.bucket_mb * 1e6
    if getattr(args, "placement", None) is not None and isinstance(args.placement, str):
        args.placement = _placement(args.placement)
    pinned = {k: getattr(args, k) for k in KNOBS + ("dp",) if getattr(args, k, None) is not None}
    check_least(pinned, _flag)
    if getattr(args, "recompute_modules", None) is not None:  # --recompute-modules a,b pins a module set
        pinned["recompute_modules"] = comma_items(args.recompute_modules)
        for mod in pinned["recompute_modules"] or ("",):
            choice("--recompute-modules", mod, RECOMPUTE_MODULES)
        if pinned.get("recompute", "selective") != "selective":
            raise SpecError("--recompute-modules", f"names what selective recompute recomputes; needs --recompute "
                            f"selective, got {pinned['recompute']!r}")
    from_scenario = getattr(args, "scenario", None) is not None or not (args.model or args.system)
    if not from_scenario:
        def users_plan():
            # --recompute-modules alone pins selective recompute of that set: the user's plan recomputes it too
            selective = "recompute_modules" in pinned and args.recompute is None
            base = scenario_from_args(argparse.Namespace(**{**vars(args), "recompute": "selective"}) if selective
                                      else args, one_plan=False)
            own = {k: v for k, v in pinned.items() if k in _SEARCH_ONLY}
            if own:  # the search-only flags are the user's plan too
                try:
                    base = dataclasses.replace(base, plan=dataclasses.replace(base.plan, **own))
                except SpecError as exc:
                    raise SpecError(_flag(exc.field.removeprefix("plan.")), exc.detail) from None
            return base
        return pinned, users_plan
    plain = argparse.Namespace(**vars(args))
    for k in pinned:
        if not (k == "vpp" and getattr(args, "pipeline_schedule", None) == "dualpipev"):  # its two chunks: keep
            setattr(plain, k, None)
    return pinned, lambda: scenario_from_args(plain, one_plan=False)


def _no_plan_error(space: SearchSpace) -> SpecError:
    """Why the space is empty: the pins that alone leave no consistent plan, or all of them together."""
    culprits = [k for k, v in space.pinned.items()
                if next(candidate_plans(SearchSpace(space.model, space.system, space.num_gpus, space.gbs,
                                                    space.base, {k: v}, space.extent)), None) is None]
    names = culprits or list(space.pinned)
    what = ", ".join(f"{_flag(k)} {space.pinned[k]}" for k in names)
    return SpecError(_flag(names[0]) if len(names) == 1 else "search",
                     f"no consistent plan of {space.model.name} on {space.num_gpus} GPUs with a global batch of "
                     f"{space.gbs} has {what} (tp must divide heads and ffn, pp·vpp fit the layers, cp the sequence, "
                     f"dp·mbs the batch; ep needs an MoE model and must divide dp and the experts; tp above the "
                     f"scale-up domain must span whole domains)")


SERVE_ONLY = ("serve", "slo_ttft", "slo_tpot", "slo_stat", "input_len", "output_len", "weight_precision",
              "kv_precision", "framework", "expert_balance", "redundant_experts", "replicas", "max_batch",
              "disaggregation")
"""Flags only a serving search (--serve) reads."""
BOTH = ("model", "system", "gpus", "tp", "pp", "dp", "ep", "top", "jobs", "max_plans", "json", "profile")
"""Flags both searches read; every other flag is the training search's."""


def _check_flag_family(args) -> None:
    """A flag the chosen search does not read is refused in one line (it was ignored: `search --serve
    --objective energy` ranked by throughput, a training search took --slo-ttft and searched on)."""
    for dest, (default, flag) in getattr(args, "flag_defaults", {}).items():
        given = getattr(args, dest, default) != default
        if not given or dest in BOTH or (dest in SERVE_ONLY) == bool(args.serve):
            continue
        raise SpecError(flag, "is a flag of the serving search: add --serve (or drop it)" if dest in SERVE_ONLY
                        else "is a flag of the training search; a serving search (--serve) does not read it")


def run(args) -> int:
    if args.top < 1:
        raise SpecError("--top", f"must be >= 1, got {args.top}")
    if not (math.isfinite(args.min_free_gb) and args.min_free_gb >= 0):
        raise SpecError("--min-free-gb", f"must be a finite number >= 0, got {args.min_free_gb}")
    if args.jobs is None:
        args.jobs = usable_cpus()
    if args.jobs < 1:
        raise SpecError("--jobs", f"must be >= 1, got {args.jobs}")
    if args.max_plans < 1:
        raise SpecError("--max-plans", f"must be >= 1, got {args.max_plans}")
    if not (math.isfinite(args.max_minutes) and args.max_minutes > 0):
        raise SpecError("--max-minutes", f"must be a finite number > 0, got {args.max_minutes}")
    if args.rank_limit < 0:
        raise SpecError("--rank-limit", f"must be >= 0 (0: count every plan faster than yours), got {args.rank_limit}")
    _check_flag_family(args)
    if args.serve:  # issue 13: serving plans under latency SLOs
        return run_serve_search(args)
    if getattr(args, "scenario", None) is None and (args.model or args.system) and args.gbs is None:
        raise SpecError("--gbs", "a search from --model/--system needs the global batch: give --gbs (sequences "
                        "per step)")
    pinned, base, num_gpus, gbs = _pins_and_base(args)
    _check_moe_pins(pinned, base.model)
    if base.plan.custom_split:
        print("note: the search splits the layers of every plan automatically (Megatron-Core's even split, or the "
              "stack's own layout where it has one); the scenario's first_stage_layers / last_stage_layers / "
              "chunk_layers are not searched", file=sys.stderr)
        base = dataclasses.replace(base, plan=dataclasses.replace(base.plan, **SPLIT_DEFAULTS))
    if base.plan.vp_group:
        print(f"note: the search runs every interleaved plan with Megatron-Core's default micro-batch groups (pp); "
              f"the scenario's vp_group {base.plan.vp_group} is priced by predict, analyze and simulate",
              file=sys.stderr)
        base = dataclasses.replace(base, plan=dataclasses.replace(base.plan, vp_group=0))
    dualpipe = base.plan.pipeline_schedule in ("dualpipe", "dualpipev")
    name = {"dualpipe": "DualPipe", "dualpipev": "DualPipeV"}.get(base.plan.pipeline_schedule, "")
    given = base  # the plan as the user gave it: the table's "yours" row is its Megatron twin
    if dualpipe:
        print(f"note: the search ranks Megatron's schedules (1F1B, interleaved); {name} is priced for the best plans "
              f"below (predict, analyze and simulate take --pipeline-schedule {base.plan.pipeline_schedule})",
              file=sys.stderr)
        schedule = base.plan.pipeline_schedule
        if schedule == "dualpipev":  # its vpp 2 is the V's two chunks, not an interleaving to pin
            pinned.pop("vpp", None)
        base = dataclasses.replace(base, plan=dataclasses.replace(
            base.plan, pipeline_schedule="auto", vpp=1 if schedule == "dualpipev" else base.plan.vpp))
    space = SearchSpace(base.model, base.system, num_gpus, gbs, base.plan, pinned, args.extent)
    resized = (base.num_gpus, base.plan.gbs) != (num_gpus, gbs)
    base = space_scenario(base, space)  # the search's scenario: at the space's size (the given plan not ranked then)
    table = build_table(space)
    if pinned and len(table) == 0:
        raise _no_plan_error(space)
    # the console merges plans that price the same (report.search_table.merged_rows): fetch enough for `top` rows
    fetch = args.top if args.json else args.top * SHOWN_PER_ROW
    result = search(base, space, objective=args.objective, top=fetch, max_plans=args.max_plans,
                    min_free_bytes=args.min_free_gb * 1e9, jobs=args.jobs, max_seconds=args.max_minutes * 60,
                    progress=lambda line: print(line, file=sys.stderr, flush=True), table=table,
                    rank_limit=args.rank_limit or None)
    if not result.ranked:
        why = f"; first failure: {result.first_failure}" if result.first_failure else ""
        free = f" with {args.min_free_gb:g} GB free" if args.min_free_gb else ""
        raise SpecError("search", f"none of the {result.num_plans:,} plans fits in "
                        f"{base.system.device.hbm.capacity_bytes / 1e9:.1f} GB per GPU{free}{why}")
    free = args.min_free_gb * 1e9

    def fits(pred) -> bool:
        return leaves_free(pred, free)

    def unfit(pred) -> str:
        return "" if fits(pred) else " (does not fit)" if not pred.memory.fits else \
            f" (leaves under {args.min_free_gb:g} GB free)"

    balanced = _balanced_best(result, space) if args.objective == "time" else None
    knobs = None if balanced is None else {k: list(v) if isinstance(v, tuple) else v for k, v in balanced[0].items()}
    dual = _dualpipe_best(result, space, schedule, free) if dualpipe else None
    own = _priced_or_none(given) if dualpipe and not resized else None
    if args.json:
        out = search_to_json(result, args.top)
        out["best_rebalanced"] = None if balanced is None else {
            **knobs, "step_time_s": balanced[1].step_time_s, "fits": fits(balanced[1])}
        if dualpipe:
            dp_plan = None if dual is None or isinstance(dual, str) else dual.scenario.plan
            out[f"best_{schedule}"] = dual if dp_plan is None else {
                **{k: getattr(dp_plan, k) for k in ("tp", "pp", "dp", "cp", "ep", "mbs", "recompute")},
                "recompute_modules": list(dp_plan.recompute_modules), "step_time_s": dual.step_time_s,
                "fits": fits(dual), "memory_bytes": dual.memory.total_bytes}
            out[f"yours_{schedule}"] = None if own is None else {
                "step_time_s": own.step_time_s, "fits": fits(own), "memory_bytes": own.memory.total_bytes}
        print(json.dumps(out, indent=2))
    else:
        print(format_search(result, args.top))
        if balanced is not None:
            pred = balanced[1]
            what = ", ".join(f"{k} {v}" for k, v in knobs.items() if v)
            best = result.ranked[0].step_time_s
            print(f"  the best plan with its pipeline stages rebalanced ({what}; the search keeps the automatic "
                  f"split): {pred.step_time_s:.3f} s, {(best - pred.step_time_s) / best:.1%} faster"
                  + unfit(pred))
        if own is not None:
            print(f"  your plan as given, under {name}: {own.step_time_s:.3f} s" + unfit(own)
                  + " (the 'yours' row ranks its twin under Megatron's schedule)")
        if isinstance(dual, str):
            print(f"  {name}: {dual}")
        elif dual is not None:
            best = result.ranked[0].step_time_s
            print(f"  the fastest of the first {DUALPIPE_TRIED} plans under {name} (vpp {dual.scenario.plan.vpp}; "
                  f"pp {dual.scenario.plan.pp}, "
                  f"mbs {dual.scenario.plan.mbs}, recompute {dual.scenario.plan.recompute}): {dual.step_time_s:.3f} s, "
                  f"{abs(best - dual.step_time_s) / best:.1%} {'faster' if dual.step_time_s <= best else 'slower'} "
                  "than the best as searched; "
                  + (f"fits ({dual.memory.total_bytes / 1e9:.1f} GB)" if fits(dual) else
                     memory_warning(dual) if not dual.memory.fits else f"leaves under {args.min_free_gb:g} GB free"))
    return 0


MOE_ONLY = ("etp", "ep_overlap", "ep_dispatch")
"""Knobs only routed experts read: a dense model's plans price the same whatever they say."""


def _check_moe_pins(pinned: dict, model) -> None:
    """A flag of the experts on a model without them is refused in one line, as `--ep 2` is (it was kept in every
    plan, with no effect on any number)."""
    for k in MOE_ONLY:
        if k in pinned and model.moe is None:
            raise SpecError(_flag(k), f"pins an MoE knob; {model.name} has no routed experts (drop the flag)")


def _priced_or_none(scn):
    """predict() of the scenario, or None where it cannot be priced (the search has said why elsewhere)."""
    from narrowpath.errors import NarrowpathError
    try:
        return predict(scn)
    except NarrowpathError:
        return None


DUALPIPE_TRIED = 20
"""Ranked plans the search prices again under DualPipe or DualPipeV (the fastest that fits is reported)."""


def _dualpipe_best(result, space, schedule: str = "dualpipe", min_free_bytes: float = 0.0):
    """The fastest of the first DUALPIPE_TRIED ranked plans run under `schedule` (DualPipe with vpp 1, DualPipeV
    with vpp 2; predict) that fits leaving `min_free_bytes` free (--min-free-gb), else the first-ranked one's
    (which does not); or why none can run it (one line)."""
    from narrowpath.errors import NarrowpathError
    from narrowpath.search.each import scenario_of
    priced, why = [], None
    seen = set()
    for cand in result.ranked[:DUALPIPE_TRIED]:
        if schedule == "dualpipev" and cand.plan.pp == 1:
            why = why or "pp 1: no pipeline to run it on"
            continue
        plan = dataclasses.replace(cand.plan, pipeline_schedule=schedule, vpp=2 if schedule == "dualpipev" else 1,
                                   **SPLIT_DEFAULTS)
        if plan in seen:  # plans that differ only in vpp meet here
            continue
        seen.add(plan)
        problems = consistency_errors(space.model, plan, space.num_gpus, space.system)
        if problems:  # e.g. an odd number of micro-batches, which DualPipe cannot pair
            why = why or problems[0][1]
            continue
        try:
            priced.append(predict(scenario_of(result.base, space, plan)))
        except NarrowpathError as exc:
            why = why or str(exc)
    if not priced:
        return f"none of the first {min(len(result.ranked), DUALPIPE_TRIED)} plans can run it: {why}"
    fitting = [p for p in priced if leaves_free(p, min_free_bytes)]
    return min(fitting, key=lambda p: p.step_time_s) if fitting else priced[0]


def _balanced_best(result, space):
    """The first-ranked plan with the split `analyze` would propose (analysis.remedies.best_rebalance), or None."""
    from narrowpath.analysis.remedies import best_rebalance
    from narrowpath.schedule.step import predict
    from narrowpath.search.each import scenario_of
    if not result.ranked:
        return None
    scn = scenario_of(result.base, space, result.ranked[0].plan)
    return best_rebalance(predict(scn))
