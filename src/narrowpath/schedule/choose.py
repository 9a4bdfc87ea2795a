"""Choose the plan knobs a source did not publish (null in a validation case), without looking at a measurement.

The rule (shared/validation/README.md): the software stack's documented default when it has one, otherwise the
fastest setting that fits in memory. Every choice is recorded in `Scenario.chosen` and printed with the
prediction, so a number never rests on an unstated assumption.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable

from narrowpath.catalog import store
from narrowpath.errors import SpecError
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.workload.split import plan_layer_ranges

Candidates = Callable[[Scenario], tuple]


def layers_per_chunk(scn: Scenario) -> int:
    """Layers of one pipeline chunk (the largest, under the plan's split; a recurrent model has one stage)."""
    return max(1, max(len(r) for st in plan_layer_ranges(scn.model, scn.plan) for r in st))


def activation_strategies(scn: Scenario) -> tuple:
    """How a stack keeps activations for backward when the source does not say: everything, selective recompute,
    full recompute of every layer or of the first quarter, half or three quarters of each chunk (Megatron
    --recompute-method block), or the saved activations of that share of layers offloaded to host memory
    (Megatron-Core / TE CPU offloading, as far as the stack allows it). Each is a patch of plan knobs."""
    return activation_patches(layers_per_chunk(scn), scn.plan.activation_cache, scn.plan.cuda_graphs,
                              offload_pipelined(scn.plan, scn.plan.pp))


def offload_pipelined(plan: Plan, pp: int) -> bool | None:
    """`activation_patches`'s `pipelined` for `plan` run with `pp` stages: whether pp > 1 where the plan's stack
    offloads as Megatron-Core does (stacks.yaml `cpu_offload`), else None (an engine the catalog does not know)."""
    return pp > 1 if store.stack_cpu_offload(plan.framework) == "megatron-core" else None


def activation_patches(layers_per_chunk: int, activation_cache: str = "default", cuda_graphs: bool = False,
                       pipelined: bool | None = None) -> tuple:
    """The activation strategies of `activation_strategies` for pipeline chunks of `layers_per_chunk` layers (the
    search tries the same ones); a full recompute of some layers only is not offered with DeepSeek-V3's FP8 cache,
    nor any full recompute under CUDA graphs (spec.plan refuses both). The shares of layers offloaded to host
    memory: under a stack on Megatron-Core's CPU offloading (`pipelined` given: whether pp > 1; stacks.yaml
    `cpu_offload`) only what its TransformerConfig takes (__post_init__: "Currently there is no support for
    Pipeline parallelism with CPU offloading", "CUDA graphs not supported with CPU offloading", and
    cpu_offloading_num_layers below the model's layer count), always beside no recompute ("CPU offloading does not
    work when activation recomputation is enabled"); elsewhere (`pipelined` None: an engine whose offloading the
    catalog does not know) also every layer of a chunk, with or without pipelining."""
    n = layers_per_chunk
    shares = sorted({k for k in (round(n / 4), round(n / 2), round(3 * n / 4)) if 0 < k < n})
    out = [{"recompute": "none"}, {"recompute": "selective"}] + ([] if cuda_graphs else [{"recompute": "full"}])
    if partial_recompute_allowed(activation_cache, cuda_graphs):
        out += [{"recompute": "full", "recompute_layers": k} for k in shares]
    limit = offload_limit(n, cuda_graphs, pipelined)
    if limit:
        out += [{"recompute": "none", "offload_layers": k} for k in sorted({*shares, limit} - {0})]
    return tuple(out)


def partial_recompute_allowed(activation_cache: str, cuda_graphs: bool) -> bool:
    """Whether a full recompute of only some layers can run: not with DeepSeek-V3's FP8 cache nor under CUDA graphs
    (spec.plan refuses both)."""
    return activation_cache != "fp8" and not cuda_graphs


def offload_limit(layers_per_chunk: int, cuda_graphs: bool, pipelined: bool | None) -> int:
    """The most layers of a chunk whose activations may be offloaded (`activation_patches`): under Megatron-Core's
    CPU offloading (`pipelined` given) none with pipeline parallelism or CUDA graphs, else one fewer than the
    model has; an engine whose offloading the catalog does not know (`pipelined` None) every layer."""
    if pipelined is None:
        return layers_per_chunk
    return 0 if (cuda_graphs or pipelined) else layers_per_chunk - 1


def module_patches(model) -> tuple:
    """Selective recompute by module (Megatron-Core --recompute-modules, workload.recompute) a stack may have run:
    the sets NVIDIA's Megatron-Bridge performance configs use for a model of this structure (the MoE activation,
    the norms with it, the whole MoE layer; the dense MLP; MLA's up-projections, alone or with the others:
    scripts/performance/configs/{deepseek,gpt_oss,qwen}/*_workload_base_configs.py `recompute_modules`)."""
    sets: list[tuple[str, ...]] = []
    if model.moe is not None:
        sets += [("moe_act",), ("layernorm", "moe_act"), ("moe",)]
    else:
        sets += [("mlp",), ("layernorm", "mlp")]
    if model.mla is not None:
        sets += [("mla_up_proj",), ("mla_up_proj", "layernorm", "moe_act"), ("mla_up_proj", "mlp")]
    return tuple({"recompute": "selective", "recompute_modules": m} for m in sets)


def recompute_strategies(scn: Scenario) -> tuple:
    """What an unpublished `recompute` may have been: the activation strategies and selective recompute by module
    (the search's full space tries both; the module sets only for models with MoE or MLA layers,
    search.space.module_sets)."""
    return activation_strategies(scn) + module_patches(scn.model)


MAX_MBS = 16
"""Largest micro-batch tried for an unpublished `mbs` (Megatron-Bridge's performance configs run 1–8)."""


def micro_batch_sizes(scn: Scenario) -> tuple:
    """What an unpublished micro-batch may have been: no stack documents a default (Megatron-LM requires
    --micro-batch-size), so every size up to MAX_MBS that divides a data-parallel rank's share of the global batch."""
    share = scn.plan.gbs // max(1, scn.plan.dp)
    return tuple(b for b in range(1, MAX_MBS + 1) if share % b == 0)


def expert_degrees(scn: Scenario) -> tuple:
    """What an unpublished expert-parallel degree may have been for an MoE model: every degree that divides the
    experts and the ranks the expert layers re-use (Megatron-Core re-factors a stage's tp·cp·dp ranks as
    etp·ep·edp, so tp·cp·dp / etp of them); 1 for a dense model."""
    moe = scn.model.moe
    if moe is None:
        return (1,)
    p = scn.plan
    ranks = p.tp * p.cp * p.dp // p.expert_tp
    return tuple(e for e in range(1, ranks + 1) if ranks % e == 0 and moe.num_experts % e == 0)


def shards_over(scn: Scenario) -> bool:
    """Whether ZeRO has a group to shard over: the dense data-parallel group (dp·cp), or for an MoE model the
    expert data-parallel group (tp·cp·dp / (etp·ep), which shards the experts' state where only they are
    replicated: tp 8 · ep 1 on 8 GPUs), as the search's space tries it (search.space)."""
    p = scn.plan
    return p.dp * p.cp > 1 or (scn.model.moe is not None and p.expert_dp > 1)


CANDIDATES: dict[str, Candidates] = {
    "recompute": recompute_strategies,
    "zero_stage": lambda s: (1, 0, 2, 3) if shards_over(s) else (0, 1),
    "sequence_parallel": lambda s: (s.plan.tp > 1,),
    "mbs": micro_batch_sizes,
    "ep": expert_degrees,
    "precision": lambda s: ("bf16",),
    "vpp": lambda s: (1,),
    "moe_routing": lambda s: ("dropless",),
    "dp_overlap": lambda s: (False,),
    "tp_comm_overlap": lambda s: (False,),
    "ep_overlap": lambda s: (False,),
    "cp_comm": lambda s: ("p2p",),
    "attention": lambda s: ("auto",),
    "etp": lambda s: (0,),
    "framework": lambda s: ("",),
}
"""Settings tried for an unpublished knob, the tool's default first. A single candidate is the documented
default (Megatron-LM: sequence parallelism with tp > 1, 1F1B without interleaving, dropless routing, overlap off;
Megatron-Bridge's recipes: BF16 mixed precision); several are tried and the fastest that fits wins. The parallel
degrees the GPU count settles are filled before (catalog.resolve.implied_knobs)."""


def interleave_degrees(scn: Scenario) -> tuple:
    """Interleaving degrees (virtual pipeline chunks per rank) a pipelined run may have used: every divisor of the
    largest stage's layer count (Megatron-LM's interleaved 1F1B, Narayanan et al. SC 2021 §2.2; a stage of n layers
    splits into v chunks of n/v, the first and last stages possibly shorter, as Llama 3's training did: Dubey et al.
    2024 §3.3.2), up to MAX_VPP; 1 without a pipeline."""
    pp = scn.plan.pp
    if pp <= 1:
        return (1,)
    n = -(-scn.model.layers // pp)
    return tuple(v for v in range(1, min(n, MAX_VPP) + 1) if n % v == 0)


MAX_VPP = 8
"""Most virtual chunks per pipeline rank tried for an unpublished interleaving degree (the search space stops at 8 too,
search.space; the Megatron-Bridge configs in the corpora run 1–24)."""


UNKNOWN_STACK_CANDIDATES: dict[str, Candidates] = {
    "vpp": interleave_degrees,
    "dp_overlap": lambda s: (False, True) if s.plan.dp * s.plan.cp > 1 else (False,),
}
"""Settings tried for the knobs of catalog.store.UNKNOWN_STACK_OPEN_KNOBS when `plan.framework` names an engine no
stack of catalog/stacks.yaml matches (those knobs are open then unless the case states them: catalog.resolve). The
rule's first half (the stack's documented default) has nothing to apply — CANDIDATES' single settings are
Megatron-LM's defaults, not this engine's — so its second half does: the fastest setting that fits. For the pipeline's
interleaving and for overlapping the gradient reduction with backward, which most engines run (PyTorch DDP's
bucketed hooks, Li et al. VLDB 2020; FSDP's prefetch; DeepSpeed ZeRO-3's overlap_comm; Megatron's
--overlap-grad-reduce), the Megatron-LM default (off) would price a tuned run of an unknown engine as an untuned one
(Llama 3 405B on 8,192 H100, Dubey et al. 2024 Table 4: tp 8 · pp 16 · dp 64 priced at 31 % MFU with vpp 1 and no
overlap, where the paper reports 43 %). Other knobs keep CANDIDATES' settings: tensor-parallel overlap (userbuffers,
async TP) and overlapped expert exchange are features of particular engines, which name themselves."""


def candidates_for(scn: Scenario, knob: str) -> tuple:
    """The settings tried for the unpublished `knob` of `scn` (UNKNOWN_STACK_CANDIDATES when its framework names no
    known stack, else CANDIDATES)."""
    if knob in UNKNOWN_STACK_CANDIDATES and store.unknown_stack(scn.plan.framework):
        return UNKNOWN_STACK_CANDIDATES[knob](scn)
    return CANDIDATES[knob](scn)


def _stack_default(scn: Scenario, knob: str):
    stack = store.stack_for(scn.plan.framework)
    defaults = store.stack_defaults(stack, scn.plan.precision)
    return (defaults[knob], stack["id"]) if knob in defaults else None


LATE_KNOBS = ("dp_overlap",)
"""Searched knobs that move no memory (overlapping the gradient reduction changes when it runs, not what is held):
chosen in a second pass on the winner of the others, which halves the product an unnamed engine's case prices."""


def _fastest(base: Scenario, names: list[str], searched: dict[str, tuple], price: Callable[[Scenario], object]):
    """(scenario, {knob: setting}, fits, {knob: settings tried}) of the best combination of the `names` knobs on
    `base`: fitting plans first, then the fastest; where none fits, the one that overflows least; None when no
    combination gives a consistent plan. With the interleaving degree searched too, the activation strategies are
    built for each degree's own chunk size (activation_strategies counts layers per chunk)."""
    per_chunk = "recompute" in names and "vpp" in names
    outer = [k for k in names if not (per_chunk and k == "recompute")]
    best, best_key = None, None
    for values in itertools.product(*(searched[k] for k in outer)):
        patch: dict = {}
        for knob, v in zip(outer, values):
            patch.update(v if isinstance(v, dict) else {knob: v})
        try:
            cand0 = dataclasses.replace(base, plan=dataclasses.replace(base.plan, **patch))
            inner = recompute_strategies(cand0) if per_chunk else (None,)
        except SpecError:
            continue
        for r in inner:
            try:
                cand = dataclasses.replace(cand0, plan=dataclasses.replace(cand0.plan, **r)) if r else cand0
                pred = price(cand)
            except SpecError:
                continue
            key = (not pred.memory.fits, pred.step_time_s if pred.memory.fits else pred.memory.overflow_bytes)
            if best_key is None or key < best_key:
                chosen = {**dict(zip(outer, values)), **({"recompute": r} if per_chunk else {})}
                tried = {k: len(searched[k]) for k in outer} | ({"recompute": len(inner)} if per_chunk else {})
                best, best_key = (cand, chosen, pred.memory.fits, tried), key
    return best


def _merge(first, second):
    """The second pass's result over the first's (its scenario, settings and counts win; fits is the second's)."""
    if second is None:
        return first
    return second[0], {**first[1], **second[1]}, second[2], {**first[3], **second[3]}


def resolve_open_knobs(scn: Scenario, price: Callable[[Scenario], object]) -> Scenario:
    """`scn` with every open knob set (see module docstring); `price(scenario)` returns a prediction with
    `step_time_s` and `memory.fits`. Raises SpecError for a knob no rule can choose (e.g. the batch size)."""
    if not scn.open_knobs:
        return scn
    fixed: dict[str, object] = {}
    notes: list[tuple[str, str]] = []
    searched: dict[str, tuple] = {}
    for knob in scn.open_knobs:
        stack = _stack_default(scn, knob)
        if stack is not None:
            fixed[knob] = stack[0]
            notes.append((knob, store.stack_note(stack[0], stack[1], " (not published)")))
        elif knob == "dp" and scn.plan.tp * scn.plan.pp * scn.plan.cp:
            fixed[knob] = scn.num_gpus // (scn.plan.tp * scn.plan.pp * scn.plan.cp)
            notes.append((knob, f"{fixed[knob]} — what the GPU count leaves (not published)"))
        elif knob in CANDIDATES:
            searched[knob] = candidates_for(scn, knob)
        else:
            raise SpecError(f"plan.{knob}", "is null (not published) and no rule can choose it without the "
                            "measurement; the case cannot be priced")
    base = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, **fixed), open_knobs=())
    names = [k for k in searched if k not in LATE_KNOBS]
    best = _fastest(base, names, searched, price)
    if best is None:
        raise SpecError(f"plan.{(names or list(searched) or list(scn.open_knobs))[0]}", "is null (not published) "
                        "and no setting of it gives a consistent plan")
    late = [k for k in searched if k in LATE_KNOBS]
    if late:  # on the first pass's winner (they move no memory)
        best = _merge(best, _fastest(best[0], late, searched, price))
    cand, values, fits, tried = best
    unnamed = store.unknown_stack(scn.plan.framework)
    for knob in searched:
        how = "fastest that fits in memory" if fits else "none fits in memory; the one that overflows least"
        v = values[knob]
        shown = ", ".join(f"{k}={x!r}" for k, x in v.items()) if isinstance(v, dict) else repr(v)
        unknown = unnamed and knob in UNKNOWN_STACK_CANDIDATES  # tried as candidates_for did
        if tried[knob] == 1:
            what = "the only setting this plan allows" if unknown else "the documented default, the only setting tried"
            notes.append((knob, f"{shown} — {what} (not published)"))
        else:
            why = "; the framework names no known stack" if unknown else ""
            notes.append((knob, f"{shown} — {how} of {tried[knob]} settings tried (not published{why})"))
    return dataclasses.replace(cand, chosen=scn.chosen + tuple(notes))
