"""`narrowpath search --serve --slo-ttft X --slo-tpot Y`: rank serving plans (tp, pp, attention dp, ep, replicas,
a disaggregated split — its prefill instances of the decode layout or of their own —, batch limit) of a model on a
fixed number of GPUs by output tokens/s per GPU under the latency SLOs (search.serve_space). Flags shared with the
training search (--tp, --pp, --dp, --ep, --gpus, --top, --jobs, --max-plans, --json) pin or size the search the same
way."""
from __future__ import annotations

import dataclasses
import json

from narrowpath.catalog.resolve import system_or_device as catalog_system
from narrowpath.catalog.resolve import calibration_from, resolve_model
from narrowpath.catalog.serving import device_formats
from narrowpath.cli.serve_cmd import load_serving_case_or_file
from narrowpath.errors import SpecError
from narrowpath.report.console import table
from narrowpath.search.serve_space import ServeSpace, count_plans, search_serve
from narrowpath.spec.serving import EXPERT_BALANCES, KV_PRECISIONS, WEIGHT_PRECISIONS, Load, ServingPlan


def add_serve_search_args(p) -> None:
    g = p.add_argument_group("serving search (--serve)")
    g.add_argument("--serve", action="store_true", help="search serving plans instead of training plans (ranked "
                   "by output tokens/s per GPU under --slo-ttft and --slo-tpot)")
    g.add_argument("--slo-ttft", dest="slo_ttft", type=float, help="time-to-first-token SLO, seconds")
    g.add_argument("--slo-tpot", dest="slo_tpot", type=float, help="time-per-output-token SLO, seconds")
    g.add_argument("--slo-stat", dest="slo_stat", choices=("mean", "p50", "p90", "p99"), default="p90",
                   help="statistic the SLOs bound (default p90)")
    g.add_argument("--input-len", dest="input_len", type=int, help="prompt tokens per request")
    g.add_argument("--output-len", dest="output_len", type=int, help="output tokens per request")
    g.add_argument("--weights", dest="weight_precision", choices=WEIGHT_PRECISIONS,
                   help="weight format every serving plan uses (default bf16, fp16 on Volta)")
    g.add_argument("--kv", dest="kv_precision", choices=KV_PRECISIONS,
                   help="KV cache format every serving plan uses (default bf16, fp16 on Volta)")
    g.add_argument("--framework", help="serving stack whose defaults the plans keep (default: the tool's own)")
    g.add_argument("--expert-balance", dest="expert_balance", choices=EXPERT_BALANCES,
                   help="MoE: tokens reach the expert-parallel ranks as the trained router sends them, or evened out "
                   "by an expert load balancer (default learned)")
    g.add_argument("--redundant-experts", dest="redundant_experts", type=int,
                   help="MoE, with --expert-balance eplb: extra expert copies, kept by every plan whose ep divides "
                   "experts + copies (the others run without; default 0)")
    g.add_argument("--replicas", type=int, help="pin the instance count")
    g.add_argument("--max-batch", dest="max_batch", type=int, help="pin the per-lane batch limit")
    g.add_argument("--no-disaggregation", dest="disaggregation", action="store_false",
                   help="leave out disaggregated plans (prefill-only instances of the decode layout, and of a "
                   "layout of their own paired with it)")


def _space(args) -> ServeSpace:
    if args.scenario:
        base, _ = load_serving_case_or_file(args.scenario)  # a serving file or an inference corpus FILE#CASE_ID
        model, system, plan, load, gpus = base.model, base.system, base.plan, base.load, base.num_gpus
    else:
        if not (args.model and args.system):
            raise SpecError("--model/--system", "give both --model and --system (or a serving file)")
        model, system, plan, load, gpus = resolve_model(args.model), catalog_system(args.system), ServingPlan(), \
            None, None
    if args.model and args.scenario:
        model = resolve_model(args.model)
    if args.system and args.scenario:
        system = catalog_system(args.system)
    gpus = args.gpus or gpus
    if not gpus:
        raise SpecError("--gpus", "give the number of GPUs to search plans for")
    if load is None or args.input_len or args.output_len:
        if not (args.input_len or (load and load.input_tokens)) or not (args.output_len or (load and load.output_tokens)):
            raise SpecError("--input-len/--output-len", "give the prompt and output lengths of the requests")
        load = Load(input_tokens=args.input_len or load.input_tokens, output_tokens=args.output_len or load.output_tokens)
    kw = {k: getattr(args, k) for k in ("weight_precision", "kv_precision", "framework", "expert_balance",
                                        "redundant_experts") if getattr(args, k, None) is not None}
    kw.update(device_formats(plan, system.device, kw))  # unstated bf16 runs as fp16 on Volta
    plan = dataclasses.replace(plan, **kw)
    pins = {k: getattr(args, k) for k in ("tp", "pp", "dp", "ep", "replicas", "max_batch")
            if getattr(args, k, None) is not None}
    return ServeSpace(model, system, gpus, load, plan, pins, disaggregation=args.disaggregation)


def _prefill(plan: ServingPlan) -> str | int:
    """The table's prefill column: '-' (no disaggregation), the prefill instances among the replicas, or with a
    layout of their own, e.g. '2 × tp2 dp1 ep1 pp1' (they are then counted in replicas too), and their own token
    budget when the search gave them one (', 4,096 tok')."""
    pool = plan.prefill_pool()
    if not plan.prefill_replicas:
        return "-"
    if pool is None:
        return plan.prefill_replicas
    budget = f", {plan.prefill_max_num_tokens:,} tok" if plan.prefill_max_num_tokens else ""
    return f"{plan.prefill_replicas} × tp{pool.tp} dp{pool.dp} ep{pool.ep} pp{pool.pp}{budget}"


def run_serve_search(args) -> int:
    if args.slo_ttft is None or args.slo_tpot is None:
        raise SpecError("--slo-ttft/--slo-tpot", "a serving search needs both latency SLOs, in seconds")
    for flag, v in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot)):
        if not v > 0:
            raise SpecError(flag, f"must be a positive number of seconds, got {v}")
    space = _space(args)
    cal = calibration_from(args.profile) if getattr(args, "profile", None) else None
    if not count_plans(space):
        raise SpecError("search", f"no consistent serving plan of {space.model.name} on {space.num_gpus} "
                        f"{space.system.device.name} GPUs matches the pins {space.pins or ''}")
    res = search_serve(space, args.slo_ttft, args.slo_tpot, stat=args.slo_stat, jobs=args.jobs,
                       max_plans=args.max_plans, calibration=cal)
    if not res.ranked:
        best = res.missed[0] if res.missed else None
        hint = (f"; the fastest-responding plan reaches TTFT {min(c.ttft_s for c in res.missed):.3g} s and TPOT "
                f"{min(c.tpot_s for c in res.missed):.3g} s ({args.slo_stat})") if best else \
            (f"; first failure: {res.first_failure}" if res.first_failure else "")
        raise SpecError("--slo-ttft/--slo-tpot", f"none of the {res.num_plans:,} serving plans meets TTFT "
                        f"{args.slo_ttft:g} s and TPOT {args.slo_tpot:g} s at {args.slo_stat}{hint}")
    top = res.ranked[:args.top]
    if args.json:
        print(json.dumps({"num_plans": res.num_plans, "meets_slo": len(res.ranked), "missed_slo": len(res.missed),
                          "failed": res.failed, "elapsed_s": res.elapsed_s, "stat": res.stat,
                          "ranked": [{"plan": {k: getattr(c.plan, k) for k in ("tp", "pp", "dp", "ep", "replicas",
                                                                                 "prefill_replicas", "prefill_tp",
                                                                                 "prefill_dp", "prefill_ep",
                                                                                 "prefill_pp",
                                                                                 "prefill_max_num_tokens", "max_batch",
                                                                                 "weight_precision", "kv_precision",
                                                                                 "ep_dispatch", "expert_balance",
                                                                                 "redundant_experts")},
                                      "output_tokens_per_s_per_gpu": c.output_tokens_per_s_per_gpu,
                                      "ttft_s": c.ttft_s, "tpot_s": c.tpot_s} for c in top]}, indent=2))
        return 0
    print(f"serving plans of {space.model.name} on {space.num_gpus} × {space.system.device.name}, "
          f"{space.load.input_tokens} + {space.load.output_tokens} tokens per request; SLO {args.slo_stat} TTFT ≤ "
          f"{args.slo_ttft:g} s, TPOT ≤ {args.slo_tpot:g} s")
    rows = [[i + 1, c.plan.tp, c.plan.pp, c.plan.dp, c.plan.ep, c.plan.replicas, _prefill(c.plan),
             c.plan.max_batch, c.output_tokens_per_s_per_gpu, c.ttft_s * 1e3, c.tpot_s * 1e3] for i, c in enumerate(top)]
    print(table(["rank", "tp", "pp", "dp", "ep", "replicas", "prefill", "batch", "out tok/s/GPU",
                 f"TTFT {args.slo_stat} (ms)", f"TPOT {args.slo_stat} (ms)"], rows))
    print(f"\n  {res.num_plans:,} plans: {len(res.ranked):,} meet the SLOs, {len(res.missed):,} miss them, "
          f"{res.failed:,} do not fit; {res.elapsed_s:.1f} s")
    return 0
