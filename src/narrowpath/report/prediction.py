"""Render a StepPrediction: terminal text and a JSON-ready dict (stable keys, SI units in the names)."""
from __future__ import annotations

from narrowpath.analysis.band import error_band
from narrowpath.analysis.flop_conventions import CONVENTIONS, flop_conventions
from narrowpath.analysis.traffic import pp_bucket_contents
from narrowpath.report.console import human_bytes, human_time, table
from narrowpath.schedule.step import BREAKDOWN_KEYS, StepPrediction

LABELS = {"compute": "compute (fwd+bwd+recompute)", "exposed_tp_comm": "exposed TP communication",
          "exposed_cp_comm": "exposed CP communication", "exposed_ep_comm": "exposed EP communication",
          "exposed_pp_comm": "exposed PP communication", "exposed_dp_comm": "exposed DP communication",
          "bubble": "pipeline bubble", "optimizer": "optimizer update"}


def breakdown_label(p: StepPrediction, key: str) -> str:
    """LABELS[key], except that the exposed pipeline bucket, which also holds the activation offload's host copies
    (schedule.step.bucket_axes), says so when they are exposed: a plan without pipelining then shows its offload
    copies, not "PP communication"."""
    if key != "exposed_pp_comm":
        return LABELS[key]
    sends, copies = pp_bucket_contents(p)
    if not copies:
        return LABELS[key]
    return "exposed PP communication + activation offload copies" if sends else \
        "exposed activation offload copies (host link)"


def prediction_to_json(p: StepPrediction) -> dict:
    s = p.scenario
    plan = s.plan
    band, validated = error_band(s, p.step_time_s).to_json()
    return {
        "scenario": s.name,
        "fits": p.memory.fits,
        "reason": memory_warning(p),
        "system": s.system.name, "device": s.system.device.name, "model": s.model.name, "num_gpus": s.num_gpus,
        "power_limit_w": s.system.power_limit_w or None,
        "seq_len": s.model.seq_len,
        "plan": {k: getattr(plan, k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "gbs", "zero_stage",
                                                "zero3_reshard",
                                                "recompute", "recompute_layers", "offload_layers",
                                                "sequence_parallel", "precision", "dp_overlap",
                                                "grad_sync_launch", "tp_comm_overlap", "attention", "cp_comm",
                                                "optimizer_moments",
                                                "grad_precision", "fp8_params", "activation_cache", "cross_entropy",
                                                "pipeline_schedule", "vp_group", "moe_probs", "moe_sync_free",
                                                "cuda_graphs", "first_stage_layers", "last_stage_layers", "etp",
                                                "ep_overlap", "ep_dispatch", "ep_dispatch_format",
                                                "moe_routing")}
        | ({"chunk_layers": list(plan.chunk_layers)} if plan.chunk_layers else {})
        | ({"recompute_modules": list(plan.recompute_modules)}
           if plan.recompute == "selective" and plan.recompute_modules else {}),
        "step_time_s": p.step_time_s,
        "band": band,
        "validated": validated,
        "chosen": {k: v for k, v in s.chosen},
        "breakdown_s": dict(p.breakdown_s),
        "host_wait_s": p.host_wait_s,
        "mfu": p.mfu, "hfu": p.hfu, "mfu_causal": flop_conventions(p).mfu_causal,
        "flop_conventions": dict(CONVENTIONS),
        "model_tflops_per_gpu": p.model_tflops_per_gpu,
        "hardware_tflops_per_gpu": p.hardware_tflops_per_gpu,
        "tokens_per_s": p.tokens_per_s,
        "model_flop_per_step": p.model_flop_per_step,
        "hardware_flop_per_step": p.hardware_flop_per_step,
        "num_microbatches": p.workload.num_microbatches,
        "memory": {"stage": p.memory.stage, "items_bytes": dict(p.memory.items), "total_bytes": p.memory.total_bytes,
                   "capacity_bytes": p.memory.capacity_bytes, "fits": p.memory.fits,
                   "overflow_bytes": p.memory.overflow_bytes},
        "transfers": [{"name": t.name, "op": t.op, "axis": t.axis, "group_size": t.group_size, "phase": t.phase,
                       "message_bytes": t.message_bytes, "count": t.count, "time_each_s": t.time_each_s,
                       "total_s": t.total_s, "exposed_s": t.exposed_s, "tier": t.tier, "algorithm": t.algorithm}
                      for t in p.transfers],
        "calibration": p.calibration.name,
        "assumptions": list(p.assumptions),
    }


def memory_warning(p: StepPrediction) -> str | None:
    m = p.memory
    if m.fits:
        return None
    pp = p.scenario.plan.pp
    where = f"pipeline rank {m.stage} (stages {m.stage} and {pp - 1 - m.stage})" if p.scenario.plan.dualpipe \
        else f"stage {m.stage}"
    return (f"does not fit: {where} needs {human_bytes(m.total_bytes)} of {human_bytes(m.capacity_bytes)} "
            f"HBM — over by {human_bytes(m.overflow_bytes)}; largest item: {m.largest_item} "
            f"({human_bytes(m.items[m.largest_item])})")


def rank_label(plan, i: int) -> str:
    """A pipeline rank's name in tables and charts: its stage, or under DualPipe the rank with its two stages."""
    return f"rank {i} (stages {i}, {plan.pp - 1 - i})" if plan.dualpipe else f"stage {i}"


def critical_title(plan, i: int) -> str:
    """Whose per-rank sizes the distance budget gives: the critical stage's, or under DualPipe the critical rank's."""
    if plan.dualpipe:
        return f"per GPU of pipeline rank {i} (stages {i} and {plan.pp - 1 - i}), the critical rank"
    return f"per rank of stage {i}, the critical stage"


def schedule_words(plan) -> list[str]:
    """The plan line's words for its pipeline: DualPipe when it runs, an interleaving group other than Megatron-Core's
    default, then the layer split (split_words)."""
    return ([f"schedule={plan.schedule}"] if plan.dualpipe or plan.dualpipev else []) + \
        ([f"vp_group={plan.vp_group}"] if plan.vp_group else []) + split_words(plan)


def split_words(plan) -> list[str]:
    """The plan's layer split as `knob=value` words for the plan line (none under the automatic split)."""
    words = [f"{end}_stage_layers={n}" for end, n in (("first", plan.first_stage_layers),
                                                      ("last", plan.last_stage_layers)) if n]
    return words + ([f"chunk_layers={','.join(map(str, plan.chunk_layers))}"] if plan.chunk_layers else [])


def host_words(plan) -> str:
    """The plan line's words for the knobs that remove host waits (spec.plan cuda_graphs, moe_sync_free), each
    with its leading space; empty when neither is on."""
    return "".join(f" {w}" for on, w in ((plan.cuda_graphs, "cuda-graphs"), (plan.moe_sync_free, "moe-sync-free"))
                   if on)


def format_prediction(p: StepPrediction, *, transfers: bool = True) -> str:
    s, plan = p.scenario, p.scenario.plan
    lines = [f"narrowpath prediction — {s.name}",
             f"  {s.model.name} on {s.num_gpus} x {s.system.device.name} ({s.system.name}"
             + (f", capped at {s.system.power_limit_w:g} W" if s.system.power_limit_w else "") + "); "
             f"tp={plan.tp} pp={plan.pp} dp={plan.dp} cp={plan.cp}"
             + (f" ({plan.cp_comm})" if plan.cp > 1 else "")
             + f" ep={plan.ep} vpp={plan.vpp}" + "".join(f" {w}" for w in schedule_words(plan))
             + f" mbs={plan.mbs} "
             f"gbs={plan.gbs} seq={s.model.seq_len} zero={plan.zero_stage} recompute={plan.recompute} "
             f"sp={plan.sequence_parallel} {plan.precision}{host_words(plan)}", ""]
    warn = memory_warning(p)
    if warn:
        lines[-1:] = [f"  WARNING: {warn}", ""]
    lines.append(f"  step time           {human_time(p.step_time_s)}")
    band = error_band(s, p.step_time_s)
    lines.append(f"  {band.level:.0%} band            {human_time(band.low_s)} – {human_time(band.high_s)}"
                 + ("" if band.inside else f"  OUTSIDE THE VALIDATED REGIMES: {band.reason}"))
    fc = flop_conventions(p)
    lines.append(f"  MFU                 {p.mfu * 100:.1f} % (every attention score counted: PaLM / Megatron)"
                 f" · {fc.mfu_causal * 100:.1f} % (causal: half the scores)")
    lines.append(f"  HFU                 {p.hfu * 100:.1f} % (FLOPs executed: recompute in, causal flash attention "
                 "skips masked blocks)")
    lines.append(f"  TFLOP/s per GPU     {p.model_tflops_per_gpu:.1f} (model)  {p.hardware_tflops_per_gpu:.1f} (hardware)")
    lines.append(f"  tokens/s            {p.tokens_per_s:,.0f}")
    lines.append("")
    rows = [[breakdown_label(p, k), f"{p.breakdown_s[k]:.4f}", f"{p.breakdown_s[k] / p.step_time_s * 100:.1f}"] for k in BREAKDOWN_KEYS
            if p.breakdown_s[k] > 0 or k in ("compute", "bubble")]
    if p.host_wait_s > 0:
        rows.insert(1, ["  of which the GPU waits for the host", f"{p.host_wait_s:.4f}",
                        f"{p.host_wait_s / p.step_time_s * 100:.1f}"])
    lines.append("  STEP BREAKDOWN")
    lines.append(table(["component", "time (s)", "share (%)"], rows))
    lines.append("")
    m = p.memory
    lines.append(f"  MEMORY PER RANK (most loaded pipeline rank: {m.stage}, running stages {m.stage} and "
                 f"{plan.pp - 1 - m.stage})" if plan.dualpipe else f"  MEMORY PER RANK (most loaded stage: {m.stage})")
    rows = [[k, f"{v / 1e9:.2f}", f"{v / m.capacity_bytes * 100:.1f}"] for k, v in m.items.items()]
    rows.append(["total", f"{m.total_bytes / 1e9:.2f}", f"{m.total_bytes / m.capacity_bytes * 100:.1f}"])
    lines.append(table(["item", "GB", "of HBM (%)"], rows))
    lines.append(f"  {'WARNING: ' + warn if warn else 'fits in ' + human_bytes(m.capacity_bytes) + ' of HBM'}")
    if transfers and p.transfers:
        lines.append("")
        lines.append("  COMMUNICATION PER STEP (one rank of the most loaded stage)")
        rows = [[t.name, t.op, t.phase, t.group_size, t.tier, t.algorithm, f"{t.message_bytes / 1e6:.2f}",
                 f"{t.count:g}", f"{t.time_each_s * 1e3:.3f}", f"{t.total_s:.4f}", f"{t.exposed_s:.4f}"]
                for t in sorted(p.transfers, key=lambda t: -t.total_s)]
        lines.append(table(["pattern", "op", "phase", "group", "tier", "algo", "msg (MB)", "count", "each (ms)",
                            "total (s)", "exposed (s)"], rows))
    lines.append("")
    lines.append("  assumptions: " + "; ".join(p.assumptions))
    return "\n".join(lines)
