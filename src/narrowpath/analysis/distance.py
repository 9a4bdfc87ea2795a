"""Budget 1 — distance: for each data item, its size per rank, where it lives, how often a step touches it, the
bytes that moves, and whether its working set could live one level nearer.

Accesses per step (critical stage rank; m micro-batches):
- weights: Σ weight_bytes read by the step's ops / weight size (core workload; every GEMM re-reads its weights);
- gradients: read + write per micro-batch (accumulation), + 1 read by the gradient sync, + 1 by the optimizer;
- optimizer_state: read + write once (Adam);
- activations: each micro-batch writes its activations once and backward reads them once: 2·m / in-flight; they
  persist from a layer's forward to its backward (every layer's, every in-flight micro-batch's), so however small
  one layer's share is, no nearer level can hold them across that interval: never "could live nearer";
- temporaries: produced and consumed once per micro-batch: 2·m;
- checkpoint: written once per checkpoint interval (synchronisation budget), to front-end storage.
Working set: the part that is reused before moving on — one layer's weights (re-read by each micro-batch and,
for a recurrent layer, every time step), one layer's activations of one micro-batch, one layer's gradients;
optimizer state is streamed once per step (no reuse to capture nearer). The nearest level (`sram`, `l2`) whose
usable capacity holds the working set is reported; a nearer home only pays when the item is re-read.
For recurrent models, the persistent-RNN cliff (analysis.persistence) is attached.
Sizes are those of one rank of the critical stage (by time); the prediction's memory table shows the stage most
loaded in memory. When they differ, `stage_note` says which items differ and why (a pipeline's first stage keeps
the most micro-batches in flight, its last stage holds the logits).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context, rank_stages
from narrowpath.analysis.options import AnalysisOptions
from narrowpath.analysis.persistence import PersistenceCliff, persistence_cliff
from narrowpath.cost.memory import in_flight_microbatches
from narrowpath.workload.split import plan_layer_ranges


@dataclass(frozen=True, slots=True)
class DataItem:
    item: str
    bytes_per_rank: float
    level: str
    accesses_per_step: float
    bytes_moved_per_step: float
    working_set_bytes: float
    nearer_level: str
    """Nearest level whose usable capacity holds the working set ('' = none nearer than where it lives)."""
    note: str


@dataclass(frozen=True, slots=True)
class DistanceBudget:
    items: tuple[DataItem, ...]
    persistence: PersistenceCliff | None
    stage: int
    """Pipeline stage whose rank the sizes describe (the critical stage by time)."""
    memory_stage: int
    """Stage of the prediction's memory table (the most loaded in memory)."""
    stage_note: str
    """Why the sizes differ from the memory table ('' when both describe the same stage)."""


def stage_note(pred, stage: int) -> str:
    """Which items of `stage` differ from the memory table's stage, with both values and the reason."""
    mem_stage = pred.memory.stage
    if stage == mem_stage:
        return ""
    a, b = pred.memory_by_stage[stage].items, pred.memory.items
    diff = [k for k in ("weights", "gradients", "optimizer_state", "activations", "temporaries")
            if abs(a.get(k, 0.0) - b.get(k, 0.0)) > 5e6]
    if not diff:
        return ""
    vals = "; ".join(f"{k} {a.get(k, 0.0) / 1e9:.2f} GB here vs {b.get(k, 0.0) / 1e9:.2f} GB" for k in diff)
    if pred.scenario.plan.dualpipe:
        p = pred.scenario.plan.pp
        return (f"sizes are pipeline rank {stage}'s (stages {stage} and {p - 1 - stage}; the critical rank by time); "
                f"the memory table shows rank {mem_stage} (the most loaded in memory): {vals}")
    why = []
    v = pred.scenario.plan.dualpipev
    if "activations" in diff:
        why.append("on DualPipeV's V every rank holds 2·pp + 1 chunk forwards, more of its first chunk the nearer it "
                   "is to rank 0, so ranks differ by what their chunks hold" if v else
                   "earlier pipeline stages keep more micro-batches in flight (1F1B warm-up)")
    if "temporaries" in diff:
        why.append("rank 0 holds the logits for the loss" if v else "the last stage holds the logits for the loss")
    if {"weights", "gradients", "optimizer_state"} & set(diff):
        why.append("rank 0 also holds the embedding and output layers, and ranks hold different layers" if v else
                   "the first and last stages also hold the embedding and output layers")
    unit = "pipeline rank" if v else "stage"  # a V's rank holds two virtual stages
    return (f"sizes are {unit} {stage}'s (the critical {unit} by time); the memory table shows {unit} {mem_stage} "
            f"(the most loaded in memory): {vals} — {', '.join(why)}")


def _nearer(ws: float, dev, usable: float) -> str:
    for name in ("sram", "l2"):
        if dev.has_level(name) and 0 < ws <= usable * dev.level(name).capacity_bytes:
            return name
    return ""


def offloaded_bytes(pred) -> float:
    """Activation bytes one micro-batch's forward offloads to host memory on the critical stage's rank (the
    `host.activation_offload` transfer, workload.build.offload_transfers); 0 without offloading."""
    return sum(t.message_bytes * t.count for t in pred.transfers if t.name == "host.activation_offload") \
        / max(1, pred.workload.num_microbatches)


def build_distance(ctx: Context, opts: AnalysisOptions, checkpoint_bytes_per_rank: float,
                   checkpoint_interval_steps: float) -> DistanceBudget:
    pred = ctx.pred
    scn = pred.scenario
    dev = scn.system.device
    m = pred.workload.num_microbatches
    mem = pred.memory_by_stage[ctx.critical_stage]  # a rank's: under DualPipe its two stages'
    stages = rank_stages(pred, ctx.critical_stage)
    layers = max(1, sum(pred.workload.stages[st].layers for st, _ in stages))
    # DualPipe: p − i + i + 1 = PP + 1 micro-batches over the rank's two stages (cost.memory.dualpipe_rank_memory)
    infl = scn.plan.pp + 1 if scn.plan.dualpipe else in_flight_microbatches(ctx.critical_stage, scn)
    weights = mem.items.get("weights", 0.0)
    w_read = sum(r.op.weight_bytes * r.count_per_step for r in ctx.ops)
    grads = mem.items.get("gradients", 0.0)
    acts = mem.items.get("activations", 0.0)
    u = opts.sram_usable_fraction
    rows = []

    def add(item, size, level, acc, ws, note, reused=True):
        rows.append(DataItem(item, size, level, acc, size * acc, ws, _nearer(ws, dev, u) if reused else "", note))

    # one layer's working set: under ZeRO-3 the layer gathered whole (its shard is what the rank keeps), else the
    # rank's share of it
    sharded = scn.plan.comm_zero_stage == 3
    w_layer, g_layer = weights / layers, grads / layers
    if sharded:  # the per-layer gathers and reduce-scatters the step prices (workload.build.zero3_transfers)
        def per_layer(suffix: str) -> float:
            """A layer's gather (or reduce-scatter): per pattern (the dense parameters', the experts' on their own
            group) the row a layer runs — the most frequent, not the embedding's — summed."""
            by_name: dict[str, list] = {}
            for t in pred.transfers:
                if t.name.endswith(suffix):
                    by_name.setdefault(t.name, []).append(t)
            return sum(max(rows, key=lambda t: (t.count, t.message_bytes)).message_bytes for rows in by_name.values())
        w_layer = per_layer("zero3_param_all_gather") or w_layer
        g_layer = per_layer("zero3_grad_reduce_scatter") or g_layer
    # a micro-batch's backward accumulates into the gradients of the stage it runs: all of them, or under DualPipe
    # one of the rank's two stages each (rank_stages' shares, weighted by their layers)
    share = sum(sh * pred.workload.stages[st].layers for st, sh in stages) / layers
    add("weights", weights, "hbm", w_read / weights if weights else 0.0, w_layer,
        "one layer's weights re-read by every micro-batch (and time step)"
        + (", gathered whole from their ZeRO-3 shards" if sharded else ""))
    add("gradients", grads, "hbm", 2.0 * m * share + 2.0, g_layer,
        "accumulated per micro-batch, layer by layer; read once by the sync and the optimizer"
        + (" (a layer's whole gradient before its reduce-scatter)" if sharded else ""))
    add("optimizer_state", mem.items.get("optimizer_state", 0.0), "hbm", 2.0, 0.0,
        "streamed once per step by Adam: no reuse to capture nearer", reused=False)
    add("activations", acts, "hbm", 2.0 * m / infl if acts else 0.0, acts / (layers * infl),
        f"{infl:g} micro-batches in flight; kept from forward to backward, so no nearer level can hold them",
        reused=False)
    offloaded = offloaded_bytes(pred) * infl
    if offloaded:
        # its working set: one offloaded layer's saved tensors of one micro-batch (each chunk's first
        # offload_layers layers go: cost.memory.stage_memory)
        n_off = sum(min(len(r), scn.plan.offload_layers) for st, _ in stages
                    for r in plan_layer_ranges(scn.model, scn.plan)[st]) or layers
        add("activations_offloaded", offloaded, "host", 2.0 * m / infl, offloaded / (n_off * infl),
            "saved tensors of the offloaded layers (plan.offload_layers): copied to host memory in forward and "
            "back before their backward", reused=False)
    add("temporaries", mem.items.get("temporaries", 0.0), "hbm", 2.0 * m, mem.items.get("temporaries", 0.0),
        "logits / gathered layers / gradient buckets")
    add("kv_cache", 0.0, "hbm", 0.0, 0.0, "training: no KV cache", reused=False)
    add("checkpoint", checkpoint_bytes_per_rank, "front_end",
        1.0 / checkpoint_interval_steps if checkpoint_interval_steps > 0 else 0.0, 0.0,
        "written once per checkpoint interval (Daly 2006)", reused=False)
    cliff = persistence_cliff(scn, u) if scn.model.arch == "lstm" and scn.system.device.has_level("sram") else None
    return DistanceBudget(tuple(rows), cliff, ctx.critical_stage, pred.memory.stage,
                          stage_note(pred, ctx.critical_stage))
