"""`narrowpath serve`: simulate a model served on a system under a load — throughput, TTFT / TPOT / end-to-end
latency (mean, p50, p90, p99), KV-cache use, MFU / MBU, the accounts per generated token and the verdict.

    narrowpath serve [SCENARIO | --model M --system S] [--rate R | --offline | --batch B]
                     [--input-len I --output-len O [--num-requests N] | --requests FILE]
                     [--json] [--plots DIR] [--timeline FILE]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Mapping

from narrowpath.analysis.serving_accounts import serving_accounts
from narrowpath.analysis.serving_whatif import serving_verdict
from narrowpath.catalog.resolve import system_or_device as catalog_system
from narrowpath.catalog.resolve import calibration_from, resolve_model
from narrowpath.catalog.serving import device_formats, load_serving_scenario, read_request_trace
from narrowpath.cli.common import case_reference, check_output_dir, check_output_file, corpus_case, writing
from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import (EXPERT_BALANCES, KV_PRECISIONS, POLICIES, WEIGHT_PRECISIONS, Load, ServingPlan,
                                     ServingScenario)

_PLAN_FLAGS = {
    "tp": "tensor-parallel GPUs of one attention-DP rank (default 1, or the file's)",
    "pp": "pipeline stages of an instance (default 1)",
    "dp": "attention data-parallel ranks per instance, MoE models (default 1)",
    "ep": "expert-parallel degree over the tp·dp GPUs of a stage (default 1)",
    "replicas": "instances serving side by side (default: --gpus / (tp·dp·pp), else 1)",
    "prefill_replicas": "of the replicas, prefill-only instances: disaggregated serving (default 0)",
    "max_batch": "sequences per micro-batch of a rank (default: the serving stack's)",
    "max_num_tokens": "token budget of one iteration (default: the serving stack's)",
    "kv_block_tokens": "tokens per paged-KV block (default: the serving stack's)",
    "spec_tokens": "speculative decoding: draft tokens per step (default 0 = off)",
    "redundant_experts": "extra expert copies an expert load balancer places over the ep ranks, with "
                         "--expert-balance eplb (default 0)",
    "prefill_tp": "prefill-only instances of their own layout: their tp (default: the decode instances'; any "
                  "--prefill-* gives the prefill pool limits of its own)",
    "prefill_dp": "the prefill instances' attention data-parallel ranks (default: the decode instances')",
    "prefill_ep": "the prefill instances' expert-parallel degree (default: the decode instances')",
    "prefill_pp": "the prefill instances' pipeline stages (default: the decode instances')",
    "prefill_max_batch": "the prefill instances' sequences per micro-batch (default: the stack's for their layout)",
    "prefill_max_num_tokens": "the prefill instances' token budget per iteration (default: the stack's)",
}


def register(sub) -> None:
    p = sub.add_parser("serve", help="simulate serving a model: throughput, TTFT/TPOT, KV cache, accounts, verdict",
                       description="Simulate a model served on a system (continuous batching, paged KV cache, "
                       "chunked prefill, disaggregation, speculative decoding) under a load, and explain where an "
                       "iteration's time goes.")
    p.add_argument("scenario", nargs="?", help="serving file (.yaml/.json; the inference-corpus case shape), or one "
                   "case of an inference corpus as FILE#CASE_ID, served as validate serves it")
    g = p.add_argument_group("deployment (override the file's)")
    g.add_argument("--model", help="catalog model id, a model file (.yaml/.json) or a HuggingFace config.json path")
    g.add_argument("--system", help="catalog system id, e.g. dgx-h100, or a GPU (its home system): an id or a "
                   "descriptive name such as 'NVIDIA H100 80GB HBM3' or B200-SXM-192GB")
    g.add_argument("--gpus", type=int, help="GPUs in all (replicas are derived when not given)")
    for f, text in _PLAN_FLAGS.items():
        g.add_argument("--" + f.replace("_", "-"), dest=f, type=int, help=text)
    g.add_argument("--weights", dest="weight_precision", choices=WEIGHT_PRECISIONS,
                   help="weight format of the linear layers (default bf16, fp16 on Volta, or the stack's checkpoint "
                   "format)")
    g.add_argument("--kv", dest="kv_precision", choices=KV_PRECISIONS,
                   help="KV cache format (default bf16, fp16 on Volta)")
    g.add_argument("--kv-fraction", dest="kv_memory_fraction", type=float,
                   help="share of the memory the KV cache may take (default: the serving stack's, 0.9): of what the "
                        "model leaves free (the tool's own default stack, TensorRT-LLM, SGLang), of the whole GPU "
                        "(vLLM's gpu_memory_utilization, when --framework names vLLM)")
    g.add_argument("--chunked-prefill", dest="chunked_prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="split prompts into chunks that fill the iteration's token budget (default: the stack's)")
    g.add_argument("--ep-dispatch", dest="ep_dispatch", choices=("all_to_all", "dedup"),
                   help="MoE dispatch: one all-to-all of the copies, or once per destination node over the fabric "
                   "and fanned out over NVLink (DeepEP; with the model's node-limited routing) (default all_to_all)")
    g.add_argument("--expert-balance", dest="expert_balance", choices=EXPERT_BALANCES,
                   help="how routed tokens spread over the expert-parallel ranks: as the trained router sends them "
                   "(skewed toward hot experts) or evened out by an expert load balancer (EPLB) (default learned)")
    g.add_argument("--graph-batch-sizes", dest="graph_batch_sizes",
                   help="decode batch sizes the engine captures CUDA graphs for, comma-separated (TensorRT-LLM "
                   "cuda_graph_config batch_sizes; default: the serving stack's list, if any)")
    g.add_argument("--graph-padding", dest="graph_padding", action=argparse.BooleanOptionalAction, default=None,
                   help="pad a decode batch to the next captured size (default: the stack's); without padding a "
                   "batch of no captured size runs eagerly")
    g.add_argument("--policy", choices=POLICIES, help="iteration policy (default: the stack's; static for --batch)")
    g.add_argument("--admission", choices=("reserve", "on-demand"),
                   help="KV admission: reserve a request's whole budget, or allocate as it grows and preempt "
                   "(default: the stack's)")
    g.add_argument("--spec-acceptance", dest="spec_acceptance", type=float,
                   help="speculative decoding: acceptance rate of one draft token (with --spec-tokens, or as a "
                   "what-if; default 0)")
    g.add_argument("--framework", help="serving stack whose defaults fill the knobs left out (free text with a "
                   "version where it matters, e.g. 'vLLM 0.6.3' for the V0 engine, 'TensorRT-LLM 1.0'; default: the "
                   "tool's own — vLLM's scheduling with fixed limits of 256 sequences and 8,192 tokens, the KV "
                   "fraction of the memory the model leaves free)")
    w = p.add_argument_group("load")
    arr = w.add_mutually_exclusive_group()
    arr.add_argument("--rate", type=float, help="Poisson arrivals, requests/s")
    arr.add_argument("--offline", action="store_true", help="all requests queued at time 0")
    arr.add_argument("--batch", type=int, help="static batches of B sequences")
    w.add_argument("--concurrency", type=int, help="closed loop: at most this many requests outstanding")
    w.add_argument("--input-len", dest="input_len", type=int, help="prompt tokens per request")
    w.add_argument("--output-len", dest="output_len", type=int, help="output tokens per request")
    w.add_argument("--num-requests", dest="num_requests", type=int,
                   help="requests in the run (default 1,000; one batch with --batch)")
    w.add_argument("--requests", help="trace file (CSV/JSON/JSONL: arrival_s, input_tokens, output_tokens)")
    w.add_argument("--seed", type=int, help="seed of the arrival process (default 0)")
    p.add_argument("--profile", help="calibration profile YAML or a device name")
    p.add_argument("--no-whatif", dest="whatif", action="store_false", help="skip the what-if re-simulations")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plots", help="directory for PNG plots (latency CDFs, one lane over time)")
    p.add_argument("--timeline", help="Perfetto/Chrome-trace JSON of one lane's iterations")
    p.set_defaults(func=run)


def graph_sizes_arg(text: str) -> tuple[int, ...]:
    """--graph-batch-sizes '1,2,4,…': positive integers, comma-separated."""
    out = []
    for part in str(text).split(","):
        try:
            b = int(part.strip())
        except ValueError:
            raise SpecError("--graph-batch-sizes", f"{part.strip()!r} is not a batch size (give e.g. 1,2,4,8,16)") \
                from None
        if not 1 <= b <= 1 << 20:
            raise SpecError("--graph-batch-sizes", f"batch sizes must be in 1 … 1,048,576, got {b}")
        out.append(b)
    return tuple(out)


def _check_trace_clash(args, base: Load | None) -> None:
    """Refuse load flags over a scenario whose workload is a trace (`workload.requests_file`) that would not replace
    it, as --requests refuses them: --rate alone failed with 'workload.input_tokens: is required', and
    --input-len, --output-len or --num-requests alone were ignored (the trace was served). An arrival flag with both
    lengths is a load of its own and replaces the trace."""
    if base is None or base.arrival != "trace" or args.requests:
        return
    arrival = [f for f, v in (("--rate", args.rate), ("--offline", args.offline or None), ("--batch", args.batch))
               if v is not None]
    given = arrival + [f for f, v in (("--num-requests", args.num_requests), ("--input-len", args.input_len),
                                      ("--output-len", args.output_len)) if v is not None]
    if given and not (arrival and args.input_len and args.output_len):
        raise SpecError(given[0], f"the scenario's workload is a trace (workload.requests_file), which sets each "
                        f"request's arrival, lengths and their number; drop {', '.join(given)}, or replace the trace "
                        "with --rate, --offline or --batch and both --input-len and --output-len")


def _load(args, base: Load | None) -> Load:
    for flag, v in (("--num-requests", args.num_requests), ("--input-len", args.input_len),
                    ("--output-len", args.output_len), ("--batch", args.batch)):
        if v is not None and v < 1:
            raise SpecError(flag, f"must be >= 1, got {v}")
    if args.requests and (args.input_len or args.output_len):
        raise SpecError("--requests", "give either a trace file or --input-len/--output-len, not both")
    clash = [f for f, v in (("--rate", args.rate), ("--offline", args.offline or None), ("--batch", args.batch),
                            ("--num-requests", args.num_requests)) if v is not None]
    if args.requests and clash:  # they were ignored: the trace's own arrivals and count were served
        raise SpecError("--requests", f"a trace sets each request's arrival and their number; drop "
                                      f"{', '.join(clash)} (--concurrency caps a trace's requests in flight)")
    _check_trace_clash(args, base)
    if args.batch is not None and args.policy not in (None, "static"):
        raise SpecError("--batch", f"runs static batches of {args.batch} (policy static), not --policy "
                                   f"{args.policy}; for a cap on a continuous batch give --max-batch")
    if args.concurrency is not None and (args.batch is not None or args.policy == "static"):
        raise SpecError("--concurrency", "a static batch prefills and decodes its sequences together, with no "
                                         "requests in flight to cap; drop --concurrency or the static batch")
    kw = {} if base is None else {f.name: getattr(base, f.name) for f in dataclasses.fields(Load)}
    if args.rate is not None:
        kw.update(arrival="poisson", rate_per_s=args.rate)
    elif args.offline:
        kw["arrival"] = "offline"
    elif args.batch is not None:
        kw.update(arrival="fixed-batch", batch_size=args.batch)
    for flag, field in (("concurrency", "concurrency"), ("input_len", "input_tokens"),
                        ("output_len", "output_tokens"), ("num_requests", "num_requests"), ("seed", "seed")):
        if getattr(args, flag) is not None:
            kw[field] = getattr(args, flag)
    if args.requests:
        kw.update(arrival="trace", requests=read_request_trace(args.requests))
    elif base is None and not (kw.get("input_tokens") and kw.get("output_tokens")):
        raise SpecError("--input-len/--output-len", "give the prompt and output lengths (or --requests FILE)")
    if kw.get("arrival") == "trace" and not args.requests and base is not None and base.arrival != "trace":
        kw["arrival"] = "offline"
    kw.setdefault("arrival", "offline")
    if kw["arrival"] == "fixed-batch" and not kw.get("num_requests"):
        kw["num_requests"] = kw["batch_size"]
    return Load(**kw)


LOAD_FLAGS = ("input_len", "output_len", "rate", "offline", "batch", "concurrency", "num_requests", "requests")
"""Flags that restate the workload (every load flag _load reads but --seed, which redraws the same load): a case's
note on its load no longer describes what is served."""
LAYOUT_KNOBS = ("tp", "pp", "dp", "replicas")
"""Knobs among which a case's GPU count was split: a note on one is stale once any of them, or --gpus, is given."""


def load_serving_case_or_file(source: str) -> tuple[ServingScenario, tuple[str, ...]]:
    """A serving file, or `FILE#CASE_ID`: the case of that id in an inference corpus (inference-corpus/1) as
    `narrowpath validate` simulates it (its unpublished knobs chosen the same way when served)."""
    ref = case_reference(source)
    if ref is None:
        return load_serving_scenario(source)
    path, case_id = ref
    from narrowpath.validate.inference import case_scenario, load_inference_corpus, nominal_output_note
    raw = corpus_case(path, case_id, "inference-corpus/1",  # validate names an id-less case case[i]
                      lambda p: {str(c.get("id", f"case[{i}]")): c for i, c in enumerate(load_inference_corpus(p))
                                 if isinstance(c, Mapping)})
    try:
        scn, open_knobs, _notes, nominal = case_scenario(raw, case_id)
    except NarrowpathError as exc:
        raise NarrowpathError(f"{path}#{case_id}: {exc}") from None
    if nominal:  # the length validate runs it at is said where the case's other choices are
        scn = dataclasses.replace(scn, chosen=scn.chosen + (nominal_output_note(scn.load.output_tokens),))
    return scn, open_knobs


def scenario_from_args(args) -> tuple[ServingScenario, tuple[str, ...]]:
    """The serving scenario of a file and/or the flags."""
    open_knobs: tuple[str, ...] = ()
    chosen: tuple = ()
    if args.scenario:
        base, open_knobs = load_serving_case_or_file(args.scenario)
        model = base.model
        system = catalog_system(args.system) if args.system else base.system
        plan0, load0, cal = base.plan, base.load, base.calibration
        chosen = base.chosen  # what the case settled, kept unless a flag below replaces it
    else:
        if not (args.model and args.system):
            raise SpecError("--model/--system", "give both --model and --system (or a serving file)")
        model, system, plan0, load0, cal = None, catalog_system(args.system), ServingPlan(), None, None
    kw = {f: getattr(args, f) for f in list(_PLAN_FLAGS) + ["weight_precision", "kv_precision", "kv_memory_fraction",
                                                             "chunked_prefill", "policy", "admission",
                                                             "spec_acceptance", "framework", "ep_dispatch",
                                                             "expert_balance", "graph_padding"]
          if getattr(args, f, None) is not None}
    if getattr(args, "graph_batch_sizes", None) is not None:
        kw["graph_batch_sizes"] = graph_sizes_arg(args.graph_batch_sizes)
    open_knobs = tuple(k for k in open_knobs if k not in kw)
    kw.update(device_formats(plan0, system.device, kw))  # unstated bf16 runs as fp16 on Volta
    if args.gpus is not None:
        inst = kw.get("tp", plan0.tp) * kw.get("dp", plan0.dp) * kw.get("pp", plan0.pp)
        pre = kw.get("prefill_replicas", plan0.prefill_replicas)  # from the flags, else the file
        pool = dataclasses.replace(plan0, **{**kw, "replicas": pre + 1}).prefill_pool() if pre else None
        rest = args.gpus - (pool.num_gpus if pool is not None else 0)  # the prefill pool's own GPUs
        if args.gpus < 1 or rest < 1 or rest % inst:
            what = f" left by the prefill pool's {pool.num_gpus}" if pool is not None else ""
            raise SpecError("--gpus", f"{args.gpus} GPUs{what} are not a multiple of tp·dp·pp = {inst}")
        replicas = rest // inst + (pre if pool is not None else 0)
        if kw.get("replicas", replicas) != replicas:  # it was taken over --gpus
            raise SpecError("--gpus", f"{args.gpus} GPUs hold {replicas} replicas of tp·dp·pp = {inst}, not the "
                                      f"{kw['replicas']} --replicas gives (give one of the two)")
        kw["replicas"] = replicas
    plan = dataclasses.replace(plan0, **kw)
    load = _load(args, load0)
    if args.model:  # a HuggingFace config states no training length, and a serving model needs none: the load's
        model = resolve_model(args.model, seq_len=load.max_seq_tokens)  # (as catalog.serving gives a file's model)
    if args.profile:
        cal = calibration_from(args.profile)
    replaced = set(kw) | ({"model"} if args.model else set())
    if any(getattr(args, f, None) not in (None, False) for f in LOAD_FLAGS):  # the load is the flags' now
        replaced.add("workload.output_tokens")
    if replaced & set(LAYOUT_KNOBS) or args.gpus is not None:  # one layout knob changed moves what the GPU count
        replaced |= set(LAYOUT_KNOBS)                              # left to the others (catalog.serving._plan)
    scn = ServingScenario(name=f"{model.name}@{system.name}", system=system, model=model, plan=plan, load=load,
                          num_gpus=plan.num_gpus, calibration=cal,
                          chosen=tuple((k, n) for k, n in chosen if k not in replaced))
    return scn, open_knobs


def run(args) -> int:
    check_output_dir("--plots", args.plots)
    check_output_file("--timeline", args.timeline)
    scn, open_knobs = scenario_from_args(args)
    result = simulate(scn, open_knobs)
    acc = serving_accounts(result)
    verdict = serving_verdict(result, acc) if args.whatif else None
    if args.plots:
        from narrowpath.report.serving_plots import write_serving_plots
        with writing("--plots"):
            write_serving_plots(result, args.plots)
    if args.timeline:
        from narrowpath.report.serving_timeline import write_serving_timeline
        with writing("--timeline", args.timeline):
            write_serving_timeline(result, args.timeline)
    if args.json:
        from narrowpath.report.serving_json import serving_to_json
        print(json.dumps(serving_to_json(result, acc, verdict), indent=2))
    else:
        from narrowpath.report.serving_console import format_serving
        print(format_serving(result, acc, verdict))
    return 0
