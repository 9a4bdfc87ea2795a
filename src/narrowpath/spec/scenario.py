"""Scenario = system + model + plan + mode, with the cross-field consistency checks."""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import as_int, choice
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.model import Model
from narrowpath.spec.plan import SPLIT_KNOBS, Plan, interleave_groups_ok, uneven_split_error
from narrowpath.spec.system import System

MAX_GPUS = 1 << 24
"""Largest job accepted (16.7 M GPUs): the placement stage lays out every rank, so absurd sizes are refused."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One job to predict: what runs (model, plan) on what (system, num_gpus)."""

    name: str = "scenario"
    system: System
    model: Model
    plan: Plan
    num_gpus: int
    """GPUs in the job; must equal tp·cp·dp·pp."""
    mode: str = "training"
    """`training` (one optimizer step) or `inference` (later issue)."""
    calibration: Calibration | None = None
    """Efficiency profile; None = the catalog's profile for the system's device."""
    open_knobs: tuple[str, ...] = ()
    """Plan knobs the source did not publish (null in a validation case): the plan holds a placeholder until
    `schedule.choose` picks them without looking at the measurement."""
    chosen: tuple[tuple[str, str], ...] = ()
    """(knob, what was chosen and why) for every knob filled in for this scenario: open knobs chosen by
    `schedule.choose`, and knobs a file left out that the software stack's defaults supplied."""

    def __post_init__(self) -> None:
        as_int(self, "num_gpus", "num_gpus")
        if self.num_gpus > MAX_GPUS:
            raise SpecError("num_gpus", f"{self.num_gpus} exceeds the supported maximum of {MAX_GPUS:,} GPUs")
        choice("mode", self.mode, ("training", "inference"))
        object.__setattr__(self, "open_knobs", tuple(self.open_knobs))
        object.__setattr__(self, "chosen", tuple(tuple(c) for c in self.chosen))
        for msg_field, msg in consistency_errors(self.model, self.plan, self.num_gpus, self.system):
            raise SpecError(msg_field, msg)


def consistency_errors(model: Model, plan: Plan, num_gpus: int, system: System | None = None) -> list[tuple[str, str]]:
    """All cross-field violations as (field, message) pairs; empty when the scenario is consistent."""
    errs: list[tuple[str, str]] = []
    p = plan
    prod = p.tp * p.cp * p.dp * p.pp
    if prod != num_gpus:
        errs.append(("plan", f"tp·cp·dp·pp = {p.tp}·{p.cp}·{p.dp}·{p.pp} = {prod} does not equal num_gpus {num_gpus}"))
    if model.arch == "transformer":
        if model.heads % p.tp:
            errs.append(("plan.tp", f"tp {p.tp} does not divide model.heads {model.heads}"))
        if model.kv_heads % p.tp:  # the training stacks split K and V by heads: Megatron-Core's attention divides
            # num_query_groups by tp (megatron/core/transformer/attention.py `divide`), torchtitan shards wk and wv by
            # output columns; serving engines replicate them instead (spec.serving)
            errs.append(("plan.tp", f"tp {p.tp} does not divide model.kv_heads {model.kv_heads} (training splits the "
                         "key/value heads over tp; serving replicates them)"))
        if model.ffn % p.tp:
            errs.append(("plan.tp", f"tp {p.tp} does not divide model.ffn {model.ffn}"))
    elif p.tp > 1 and model.hidden % p.tp:
        errs.append(("plan.tp", f"tp {p.tp} does not divide model.hidden {model.hidden}"))
    chunks = p.pp * p.vpp
    if chunks > model.layers and (model.layers + 2) % chunks:
        errs.append(("plan.pp", f"pp·vpp = {p.pp}·{p.vpp} = {chunks} exceeds model.layers {model.layers} "
                     "(or layers + 2 with the embedding and loss counted as layers)"))
    split_knob = next((k for k in SPLIT_KNOBS if getattr(p, k)), None)
    if split_knob and model.arch != "transformer":
        errs.append((f"plan.{split_knob}", "sets transformer layers per stage; this model is not a transformer"))
    elif p.chunk_layers and sum(p.chunk_layers) != model.layers:
        errs.append(("plan.chunk_layers", f"holds {sum(p.chunk_layers)} layers in all; model.layers is "
                     f"{model.layers}"))
    elif p.first_stage_layers or p.last_stage_layers:
        why = uneven_split_error(model.layers, p.pp, p.vpp, p.first_stage_layers, p.last_stage_layers)
        if why:
            errs.append((f"plan.{why[0]}", why[1]))
    if model.seq_len % p.cp:
        errs.append(("plan.cp", f"cp {p.cp} does not divide model.seq_len {model.seq_len}"))
    if p.cp > 1 and p.cp_comm == "a2a":
        # Transformer Engine's a2a (Ulysses) path asserts that the query and the key/value heads of a tp rank both
        # split over cp; K, V heads are not replicated to make them fit
        for what, n in (("heads", model.heads), ("kv_heads", model.kv_heads)):
            if model.arch == "transformer" and n % (p.tp * p.cp):
                errs.append(("plan.cp_comm", f"a2a context parallelism splits the heads over tp·cp = "
                             f"{p.tp * p.cp}, which does not divide model.{what} {n}"))
    if p.sequence_parallel and (model.seq_len // p.cp) % p.tp:
        errs.append(("plan.sequence_parallel", f"seq_len/cp = {model.seq_len // p.cp} is not divisible by tp {p.tp}"))
    if p.ep > 1 or p.etp > 1:
        if model.moe is None:
            errs.append(("plan.ep" if p.ep > 1 else "plan.etp", f"expert parallelism (ep {p.ep}, etp {p.etp}) "
                         "needs an MoE model"))
        else:
            if model.moe.num_experts % p.ep:
                errs.append(("plan.ep", f"ep {p.ep} does not divide model.moe.num_experts {model.moe.num_experts}"))
            # Megatron-Core re-factors a stage's tp·cp·dp ranks as etp·ep·edp for the expert layers
            if (p.tp * p.cp * p.dp) % (p.ep * p.expert_tp):
                errs.append(("plan.ep", f"ep·etp = {p.ep}·{p.expert_tp} does not divide tp·cp·dp = "
                             f"{p.tp}·{p.cp}·{p.dp} (the expert layers re-use the ranks of one pipeline stage)"))
    if model.moe is not None and model.arch == "transformer":
        if model.moe.expert_ffn % p.expert_tp:
            errs.append(("plan.etp", f"expert tensor parallelism {p.expert_tp} does not divide "
                         f"model.moe.expert_ffn {model.moe.expert_ffn}"))
        if model.moe.shared_experts and model.moe.shared_ffn % p.tp:
            errs.append(("plan.tp", f"tp {p.tp} does not divide model.moe.shared_ffn {model.moe.shared_ffn}"))
    if p.pipeline_schedule == "dualpipe":
        if model.arch != "transformer":
            errs.append(("plan.pipeline_schedule", "dualpipe splits transformer layers; the LSTM model runs 1F1B"))
        elif p.pp > 1 and (p.pp % 2 or p.num_microbatches % 2 or p.num_microbatches < 2 * p.pp):
            errs.append(("plan.pipeline_schedule", f"dualpipe needs an even pp and an even number of micro-batches, "
                         f"at least 2·pp (deepseek-ai/DualPipe asserts both); got pp {p.pp}, "
                         f"{p.num_microbatches} micro-batches"))
    if p.pipeline_schedule == "dualpipev" and p.pp > 1:
        if model.arch != "transformer":
            errs.append(("plan.pipeline_schedule", "dualpipev splits transformer layers; the LSTM model runs 1F1B"))
        elif p.num_microbatches < 2 * p.pp:
            errs.append(("plan.pipeline_schedule", f"dualpipev needs at least as many micro-batches as its 2·pp = "
                         f"{2 * p.pp} virtual stages (PyTorch ScheduleDualPipeV refuses fewer); got "
                         f"{p.num_microbatches}"))
    elif p.pp > 1 and p.vpp > 1:
        errs += interleave_group_errors(p)
    if model.arch == "lstm" and (p.pp > 1 or p.cp > 1):
        errs.append(("plan", "the LSTM model supports tp and dp only"))
    if model.arch == "lstm":  # its workload (workload/lstm.py) has no ZeRO sharding, recompute or SP to price
        for knob, value, plain in (("zero_stage", p.zero_stage, 0), ("recompute", p.recompute, "none"),
                                   ("sequence_parallel", p.sequence_parallel, False)):
            if value != plain:
                errs.append((f"plan.{knob}", f"the LSTM model is modelled without it: {knob} must be {plain!r}, "
                             f"got {shown(value)}"))
    if system is not None and not system.device.fused_attention and p.attention in ("flash", "flash2"):
        errs.append(("plan.attention", f"{p.attention}: {system.device.name} runs no fused attention kernel "
                     "(FlashAttention needs Ampere or later); use auto or unfused"))
    if system is not None and system.device.supports(p.precision):
        errs.append(("plan.precision", f"{p.precision}: {system.device.supports(p.precision)}"))
    dom = system.job_domain(num_gpus) if system is not None else 0  # the job's share of a domain (NVL72: 64)
    if dom and p.tp > dom and p.tp % dom:
        errs.append(("plan.tp", f"tp {p.tp} spans the job's scale-up domains of {dom} GPUs unevenly"))
    return errs


def interleave_group_errors(p) -> list[tuple[str, str]]:
    """What Megatron-Core's interleaved schedule refuses of a plan's micro-batch groups
    (`forward_backward_pipelining_with_interleaving`): a group outside [pp, micro-batches], or a last group of
    fewer than pp micro-batches ('dependency bubbles'). With the default group (pp) that is a micro-batch count pp
    does not divide."""
    g, m = p.interleave_group, p.num_microbatches
    if interleave_groups_ok(p.pp, m, p.vp_group):
        return []
    if not p.vp_group:
        return [("plan.gbs", f"interleaved schedule needs micro-batches ({m}) divisible by pp {p.pp}")]
    if not p.pp <= g <= m:
        return [("plan.vp_group", f"Megatron-Core takes a group of pp ({p.pp}) to the micro-batches ({m}), got {g}")]
    return [("plan.vp_group", f"leaves a last group of {m % g} micro-batches ({m} mod {g}), fewer than pp "
             f"{p.pp}: Megatron-Core refuses it (dependency bubbles)")]

