"""The accounts of a serving run, per generated token: bytes per useful FLOP at each level, collectives per token
with their tier, the distance budget of the weights and the KV cache, and MFU / MBU.

They are read off the run's mean iteration (schedule.serving_stats.LaneTotals over the lanes' iterations: mean
tokens, decodes, context read, prompt pairs), priced with the same ops and transfers as the simulation.
- Levels (analysis.ledger's convention): hbm = the ops' HBM traffic (what the roofline prices); sram / l2 = GEMM
  operand traffic through 128- and 256-wide tiles, at least the HBM traffic and a per-query-head decode's re-reads of
  the KV cache through L2 (Op.l2_bytes); scale_up / scale_out = bytes a GPU
  sends per collective on each tier (analysis.traffic); front_end = token ids in and out (4 bytes each).
- Useful FLOPs per generated token: 2 per active parameter the token multiplies (attention, MLP or top_k + shared
  experts, output layer) plus the attention scores and weighted sum over its context (Kaplan et al. 2020 §2.1,
  C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn); prompt tokens count the same per token.
- MFU = useful FLOP/s per GPU / dense peak of the weight format; MBU = (weights read + KV cache read) per second
  per GPU / HBM peak bandwidth (the memory-bandwidth utilisation of decoding, Databricks 2023 'LLM inference
  performance engineering').
- Time split (`iteration_split`): the run's prompt-carrying, graphed decode-only and eager decode-only iterations
  apart, each at its mean size: a host-bound one (the executor's per-request work or an eager kernel-by-kernel
  dispatch outlasting the GPU on one thread) is all the host's; otherwise its GPU time by what bounds each op, plus
  speculative draft passes, the dummy sequences padding a decode batch to its CUDA graph's size, a static session's
  serial kernel launch and the host work a serial pipeline loop runs between the stages
  (ServingCost.iteration_parts); with attention DP, the wait of a rank's iteration for its group's slowest rank
  (`lockstep_wait_s`: the simulated iterations' mean less the priced kinds'). `gpu_busy_share`: the share of that
  time the GPU works.
- Per generated token figures are per GPU: a lane iteration's sums over the stages, over its tokens and the pp
  stages (a GPU runs its stage once for each of the pp lanes in flight).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.ledger import L2_TILE, SRAM_TILE
from narrowpath.analysis.traffic import tier_bytes_per_rank
from narrowpath.schedule.serving_cost import host_bookkeeping_s
from narrowpath.schedule.serving_run import ServingRun, step_pricer
from narrowpath.workload.counts import active_parameter_count
from narrowpath.workload.serving import VALUE_BYTES, kv_bytes_per_token_layer

LEVELS = ("sram", "l2", "hbm", "host", "scale_up", "scale_out", "front_end")
TOKEN_ID_BYTES = 4.0


@dataclass(frozen=True, slots=True)
class MeanIteration:
    """The average iteration of a lane."""

    tokens: float
    decodes: float
    decode_ctx: float
    prompt_tokens: float
    prompt_pairs: float
    duration_s: float
    output_tokens: float
    """Tokens generated per iteration (all sequences of the lane)."""
    prompt_prefix: float = 0.0
    """Tokens cached ahead of the iteration's prompt chunks (LaneTotals.prompt_prefix_tokens per iteration)."""


@dataclass(frozen=True, slots=True)
class LevelRow:
    level: str
    bytes_per_token: float
    bytes_per_useful_flop: float
    bw_bytes_per_s: float
    time_per_token_s: float
    """bytes_per_token / the level's bandwidth, per GPU (a floor)."""


@dataclass(frozen=True, slots=True)
class CollectiveRow:
    name: str
    op: str
    axis: str
    tier: str
    group_size: int
    message_bytes: float
    per_token: float
    """Executions per generated token (per GPU)."""
    time_per_token_s: float


@dataclass(frozen=True, slots=True)
class DataItemRow:
    item: str
    bytes_per_gpu: float
    level: str
    bytes_read_per_token: float
    working_set_bytes: float
    nearer_level: str
    note: str


@dataclass(frozen=True, slots=True)
class ServingAccounts:
    mean: MeanIteration
    useful_flop_per_token: float
    levels: tuple[LevelRow, ...]
    collectives: tuple[CollectiveRow, ...]
    distance: tuple[DataItemRow, ...]
    mfu: float
    mbu: float
    time_split: dict[str, float]
    """Share of the mean iteration's time by what bounds it (see `iteration_split`)."""
    gpu_busy_share: float = 1.0
    """Share of the iterations' time the GPU works (the rest it waits for the host: hidden behind a host-bound
    iteration's bookkeeping or dispatch, or a static session's serial launch)."""


def mean_iteration(run: ServingRun) -> MeanIteration:
    t = run.result.totals
    it = max(1, t.iterations)
    q = 1 + run.scenario.plan.spec_tokens
    out = float(run.result.output_tokens.sum())  # the totals sum over every lane's iterations
    return MeanIteration(t.tokens / it, t.decode_tokens / it / q, t.decode_ctx_tokens / it, t.prompt_tokens / it,
                         t.prompt_pairs / it, t.busy_s / it, out / it, t.prompt_prefix_tokens / it)


def iteration_work(cost, T: float, decodes: float, decode_ctx: float, prompt_tokens: float, prompt_pairs: float,
                   q: float, rows: float, prompt_prefix: float = 0.0) -> tuple[list, list]:
    """Ops and transfers of one lane iteration of T tokens over all its stages, the output layer over `rows`; its
    prompt chunks read the context of their own tokens and the `prompt_prefix` cached ahead of them, as the
    simulator prices them (Σ (p + c))."""
    ops, trs = [], []
    for s in range(cost.scn.plan.pp):
        ops += cost.token_ops(s, T)
        ops += cost.attention_ops(s, decodes, decode_ctx, prompt_tokens, prompt_pairs, prompt_tokens + prompt_prefix,
                                  q)
        trs += cost.token_transfers(s, T)
    h_ops, h_trs = cost.head(rows)
    return ops + h_ops, trs + h_trs


def _useful_flop_per_token(run: ServingRun, mean: MeanIteration) -> float:
    """Useful FLOPs per token the mean iteration processes: 2 per active parameter (the embedding lookup none), and
    2·layers·heads·(d_qk + d_v) per (query, key) pair its attention reads — a decode's over its whole context, a
    prompt token's over the prompt before it (causal, a chunk over the chunks before it too): the pairs of both
    kinds over the tokens of both. (A prompt token was counted at the decodes' mean context whenever an iteration
    held a decode: 68.5 % MFU where 50.2 % is right for a 32k-token prompt and 2 output tokens.)"""
    m = run.scenario.model
    tokens = mean.decodes + mean.prompt_tokens
    pairs_per_token = (mean.decode_ctx + mean.prompt_pairs) / tokens if tokens > 0 else 0.0
    attn = 2 * m.layers * m.heads * (m.qk_head_dim + m.v_head_dim) * pairs_per_token
    return 2 * (active_parameter_count(m) - m.vocab * m.hidden) + attn


def serving_accounts(run: ServingRun) -> ServingAccounts:
    """The accounts of `run` (module docstring)."""
    cost, scn = run.cost, run.scenario
    p, dev = scn.plan, scn.system.device
    mean = mean_iteration(run)
    q = 1 + p.spec_tokens
    gen = max(mean.output_tokens, 1e-12)
    # a lane's iteration runs every stage once; a GPU holds one stage and runs it for each of the pp lanes in flight,
    # so per GPU and token the stages' sums are divided by pp
    per_gpu_token = gen * p.pp
    ops, trs = iteration_work(cost, mean.tokens, mean.decodes, mean.decode_ctx, mean.prompt_tokens,
                              mean.prompt_pairs, q, mean.decodes, mean.prompt_prefix)
    flop_tok = _useful_flop_per_token(run, mean)
    # useful FLOPs of one iteration on one tensor-parallel GPU (the byte counts below are per GPU, all stages)
    iter_flop = (mean.decodes + mean.prompt_tokens) * flop_tok / p.tp
    kvl = kv_bytes_per_token_layer(scn.model, p)
    level_bytes = dict.fromkeys(LEVELS, 0.0)
    w_bytes = kv_bytes = 0.0
    for op, n in ops:
        level_bytes["hbm"] += op.hbm_bytes * n
        a = 0.5 if op.dtype == "fp4" else VALUE_BYTES.get(op.dtype, 2.0)
        for lv, tile in (("sram", SRAM_TILE), ("l2", L2_TILE)):
            level_bytes[lv] += n * max(max(op.hbm_bytes, op.flop * a / tile) if op.kind != "vector" and op.flop
                                       else op.hbm_bytes, op.l2_bytes)
        w_bytes += op.weight_bytes * n
        if op.name == "attn_decode":
            kv_bytes += mean.decode_ctx * kvl * n
    coll: dict[tuple, list] = {}
    comm_s = 0.0
    for pt in trs:
        tb = tier_bytes_per_rank(pt.transfer.op, pt.transfer.message_bytes, pt.span, pt.cost.bottleneck_tier)
        for tier, b in tb.items():
            level_bytes[tier] += b * pt.count
        key = (pt.transfer.name, pt.cost.bottleneck_tier)
        row = coll.setdefault(key, [pt, 0.0, 0.0])
        row[1] += pt.count
        row[2] += pt.cost.time_s * pt.count
        comm_s += pt.cost.time_s * pt.count
    level_bytes["front_end"] = (mean.prompt_tokens + gen) * TOKEN_ID_BYTES
    bw = {"sram": dev.level("sram").bw_bytes_per_s if dev.has_level("sram") else 0.0,
          "l2": dev.level("l2").bw_bytes_per_s if dev.has_level("l2") else 0.0,
          "hbm": dev.hbm.bw_bytes_per_s, "host": scn.system.host_bw_bytes_per_s_per_gpu,
          "scale_up": scn.system.tier("scale_up").bw_bytes_per_s_per_gpu,
          "scale_out": scn.system.tier("scale_out").bw_bytes_per_s_per_gpu,
          "front_end": scn.system.tier("front_end").bw_bytes_per_s_per_gpu if scn.system.has_tier("front_end")
          else 0.0}
    levels = tuple(LevelRow(lv, level_bytes[lv] / per_gpu_token, level_bytes[lv] / iter_flop if iter_flop else 0.0,
                            bw[lv], level_bytes[lv] / per_gpu_token / bw[lv] if bw[lv] else 0.0) for lv in LEVELS)
    collectives = tuple(CollectiveRow(pt.transfer.name, pt.transfer.op, pt.transfer.axis, tier, pt.span.size,
                                      pt.transfer.message_bytes, cnt / per_gpu_token, t / per_gpu_token)
                        for (name, tier), (pt, cnt, t) in coll.items())
    mem = run.limits.memory
    # the limits are the decode instances' (a prefill pool of its own layout has its own): their pool's KV use
    kv_use = run.result.pools["decode"].kv_utilisation(run.result.makespan_s) if run.result.pools else \
        run.result.kv_utilisation
    kv_held = kv_use * mem.kv_pool_bytes
    layers = max(1, len(cost.stages[0]))
    seq_kv = mem.kv_bytes_per_token * mem.footprint(float(run.result.input_tokens.mean()
                                                          + run.result.output_tokens.mean() / 2))
    # reads of a decode's cache that HBM serves: every one where the kernel re-reads it from HBM, or no L2 holds it
    hbm_reads = cost.kv_reads if cost.kv_reread == "hbm" or not dev.has_level("l2") else 1.0
    distance = (
        DataItemRow("weights", mem.weights_bytes, "hbm", w_bytes / per_gpu_token, mem.weights_bytes / layers,
                    _nearer(mem.weights_bytes / layers, dev),
                    "every weight is read once per iteration and shared by the iteration's tokens"),
        DataItemRow("kv_cache", kv_held, "hbm", kv_bytes * hbm_reads / per_gpu_token, seq_kv / layers, "",
                    ("each decode reads its whole context once per token and nothing re-reads it within the "
                     "iteration, so no nearer level helps" if cost.kv_reads <= 1 else
                     f"each decode reads its whole context {cost.kv_reads:g} times per token, its kernel giving "
                     f"every query head its own block: "
                     + ("from HBM each time" if hbm_reads > 1 else "from HBM once, then through L2"))
                    + f"; {kv_use:.0%} of the {mem.kv_pool_bytes / 1e9:.1f} GB pool in use on "
                    "average"),
        DataItemRow("activations", mem.activation_bytes, "hbm", 0.0, mem.activation_bytes, "",
                    "workspace of one forward pass, rewritten every iteration"),
    )
    dur = mean.duration_s
    split, gpu_busy = iteration_split(run)
    total = sum(split.values())
    split = {k: v / total for k, v in split.items()} if total > 0 else split
    peak = dev.matrix_peak(p.weight_precision)
    tokens_per_s_gpu = run.result.total_tokens_per_s / scn.num_gpus
    mfu = tokens_per_s_gpu * flop_tok / peak
    mbu = (w_bytes + kv_bytes) / dur / dev.hbm.bw_bytes_per_s if dur else 0.0
    return ServingAccounts(mean, flop_tok, levels, collectives, distance, mfu, mbu, split, gpu_busy)


def _nearer(working_set: float, dev) -> str:
    """Nearest on-chip level whose capacity holds the working set ('' = none)."""
    for name in ("sram", "l2"):
        if dev.has_level(name) and 0 < working_set <= 0.5 * dev.level(name).capacity_bytes:
            return name
    return ""


HOST_KEY = "host: executor per-request work"
"""The time_split row of an iteration the host's per-request bookkeeping holds up beyond its GPU work."""
DISPATCH_KEY = "host: eager kernel dispatch"
"""... an eager iteration's kernel-by-kernel issue holds up beyond its GPU work and the bookkeeping."""
LAUNCH_KEY = "host: serial kernel launch"
"""... a static session's enqueue of every kernel after the previous step has finished adds."""
DRAFT_KEY = "gpu: speculative draft passes"
"""... a speculative draft head's passes (MTP / EAGLE) over the decodes add to the GPU work."""
PAD_KEY = "padding: graph dummy sequences"
"""... the dummy sequences that pad a decode batch to its CUDA graph's size add to the GPU work."""
LOCKSTEP_KEY = "sync: waiting for the slowest attention-DP rank"
"""... an attention-DP rank's iteration waits for its group's slowest rank (`lockstep_wait_s`)."""
L2_REREAD_KEY = "l2: kv cache re-reads"
"""The time_split row of decode attention bound by streaming each kv head's cache from L2 once per query head."""


@dataclass(frozen=True, slots=True)
class IterationKind:
    """The mean iteration of one kind: those carrying prompt tokens, the decode-only ones on a captured graph (or
    on an engine not held to graph sizes) and the decode-only ones no graph fits (eager)."""

    count: int
    decodes: float
    decode_ctx: float
    prompt_tokens: float = 0.0
    prompt_pairs: float = 0.0
    prompt_prefix: float = 0.0
    """Tokens cached ahead of the iteration's prompt chunks (their context is prompt_tokens + this)."""
    graph: bool | None = None
    """Decode-only: on a captured graph (True), eager (False); None: the engine is not held to graph sizes, or a
    prompt iteration."""
    padded_decodes: float = 0.0
    """The batch a graphed decode-only iteration runs at on average (its CUDA graph's size when padded)."""
    rows: float = 0.0
    """Sequences producing a token (the decodes and the prompts the iteration finishes)."""
    requests: float = 0.0
    """Requests the executor handles (the decodes and the prompt chunks)."""


def iteration_kinds(run: ServingRun) -> list[IterationKind]:
    """The run's kinds of iteration at their mean sizes (LaneTotals, summed over all lanes): an eager-prefill stack
    issues a prompt iteration kernel by kernel, a graph-capturing stack runs a decode-only one at a graph's size or,
    when none fits, eagerly."""
    t, cost, q = run.result.totals, run.cost, 1 + run.scenario.plan.spec_tokens
    held = cost.graph_sizes is not None
    out = []
    n_pre, n_eager = t.prompt_iterations, t.eager_iterations
    n_graph = t.iterations - n_pre - n_eager
    graph_decodes = t.decode_tokens / q - t.prompt_iteration_decodes - t.eager_decodes
    graph_ctx = t.decode_ctx_tokens - t.prompt_iteration_decode_ctx - t.eager_decode_ctx
    if n_graph > 0 and graph_decodes > 0:
        d = graph_decodes / n_graph
        out.append(IterationKind(n_graph, d, max(0.0, graph_ctx) / n_graph, graph=True if held else None,
                                 padded_decodes=max(d, t.padded_decodes / n_graph), rows=d, requests=d))
    if n_eager > 0:
        d = t.eager_decodes / n_eager
        out.append(IterationKind(n_eager, d, t.eager_decode_ctx / n_eager, graph=False, padded_decodes=d, rows=d,
                                 requests=d))
    if n_pre > 0:
        d = t.prompt_iteration_decodes / n_pre
        out.append(IterationKind(n_pre, d, t.prompt_iteration_decode_ctx / n_pre, t.prompt_tokens / n_pre,
                                 t.prompt_pairs / n_pre, t.prompt_prefix_tokens / n_pre,
                                 rows=d + t.prompt_iteration_done / n_pre,
                                 requests=d + t.prompt_iteration_chunks / n_pre))
    return out


def kind_split(run: ServingRun, k: IterationKind) -> tuple[dict[str, float], float, float]:
    """Seconds of one kind's mean iteration by what bounds it, the seconds of it the GPU works and the iteration's
    seconds. From its parts (ServingCost.iteration_parts, a graphed decode iteration priced at its mean padded batch
    with the dummies' GPU work split off as `padding`, speculative draft passes included): when the host's
    per-request work or an eager dispatch outlasts the GPU's on the executor's own thread, the GPU work runs hidden
    behind it and the whole iteration is the host's (`host: executor per-request work` for the bookkeeping,
    `host: eager kernel dispatch` for the rest) — under an engine whose bookkeeping waits for the GPU
    (`ServingCost.host_serial`, vLLM V0) only the eager issue hides the GPU, the bookkeeping adds to it —; otherwise
    its GPU work by what bounds each op (`time_split`), the
    draft passes, the padding, a static session's serial launch, and the host work and eager issue a serial
    pipeline loop puts between the stages. A disaggregated deployment's prompt iterations run on its prefill
    instances: priced on their layout when it differs (`ServingRun.prefill_cost`)."""
    cost, p = run.cost, run.scenario.plan
    if k.prompt_tokens and run.prefill_cost is not None:
        cost = run.prefill_cost
        p = cost.scn.plan
    q = 1 + p.spec_tokens
    P, pairs, d, ctx = k.prompt_tokens, k.prompt_pairs, k.decodes, k.decode_ctx
    pctx = P + k.prompt_prefix
    draft = step_pricer(cost, p.spec_draft_layers, p.spec_tokens).draft_s(d, P)
    if k.graph:  # at the mean padded batch, each dummy holding one context token; the host handles the real ones
        x = k.padded_decodes
        parts = cost.iteration_parts(x * q, x, ctx + x - d, rows=x, queries_per_seq=q, requests=d, extra_gpu_s=draft,
                                     graph=True)
        real = cost.context_line(d * q, d, 0, None, q, d, draft, pad=False, launch=False, host=False, eager=False,
                                 graph=True)(ctx)
        parts["padding"], parts["gpu"] = parts["gpu"] - real, real
    else:
        parts = cost.iteration_parts(d * q + P, d, ctx, P, pairs, pctx, k.rows, q, k.requests, draft, k.graph)
    whole, busy = sum(parts.values()), parts["gpu"] + parts["padding"]
    serial = cost.pp_host_serial and p.pp > 1
    if cost.host_serial and not serial and parts["dispatch"] > 0:  # the eager issue hides the GPU, then the bookkeeping
        return {HOST_KEY: parts["host"], DISPATCH_KEY: whole - parts["host"]}, busy, whole
    if not (serial or cost.host_serial) and parts["host"] + parts["dispatch"] > 0:  # the GPU hides behind the host
        bookkeeping = min(whole, host_bookkeeping_s(cost.host_per_request_s, k.requests, p.pp))
        return {HOST_KEY: bookkeeping, DISPATCH_KEY: whole - bookkeeping}, busy, whole
    ops, trs = iteration_work(cost, d * q + P, d, ctx, P, pairs, q, k.rows, k.prompt_prefix)
    reads = cost.kv_reads if cost.kv_reread == "hbm" else 1.0  # a kernel re-reading per query head from HBM
    out = time_split(cost, ops, trs, ctx * kv_bytes_per_token_layer(run.scenario.model, p) * reads)
    extra = {DRAFT_KEY: draft, PAD_KEY: parts["padding"], LAUNCH_KEY: parts["launch"], HOST_KEY: parts["host"],
             DISPATCH_KEY: parts["dispatch"]}
    for key, v in extra.items():
        if v > 0:
            out[key] = out.get(key, 0.0) + v
    return out, busy, whole


def iteration_split(run: ServingRun) -> tuple[dict[str, float], float]:
    """Mean seconds per iteration by what bounds it, and the share of the iterations' time the GPU works: each kind
    of iteration (`kind_split`) weighted by how many of them the run had."""
    kinds = iteration_kinds(run)
    n = sum(k.count for k in kinds)
    out: dict[str, float] = {}
    busy = whole = 0.0
    for k in kinds:
        rows, gpu, total = kind_split(run, k)
        busy += gpu * k.count / n
        whole += total * k.count / n
        for key, v in rows.items():
            out[key] = out.get(key, 0.0) + v * k.count / n
    wait = lockstep_wait_s(run, whole)
    if wait > 0:
        out[LOCKSTEP_KEY] = wait
        whole += wait
    return out, (min(1.0, busy / whole) if whole > 0 else 1.0)


def lockstep_wait_s(run: ServingRun, priced_s: float) -> float:
    """Mean seconds an iteration of an attention-DP rank waits for its group's slowest rank (LaneGroup: every MoE
    layer synchronises the ranks, so an iteration lasts as long as the slowest rank's — a rank with a prompt chunk
    holds up the others): the iterations' simulated mean time less `priced_s`, their kinds priced at each rank's own
    mean sizes. 0 without attention DP (a lane's iterations are its own: the two agree to within about 1 %)."""
    t = run.result.totals
    dp = max(run.scenario.plan.dp, run.prefill_cost.scn.plan.dp if run.prefill_cost is not None else 1)
    if dp <= 1 or t.iterations <= 0:
        return 0.0
    return max(0.0, t.busy_s / t.iterations - priced_s)


def time_split(cost, ops, transfers, kv_read_bytes_per_layer_op: float) -> dict[str, float]:
    """Seconds of an iteration by what bounds each op (its roofline side): `hbm: weights`, `hbm: kv cache`,
    `hbm: activations` (a memory-bound op's time split by its bytes), `l2: kv cache re-reads` (a decode kernel that
    reads a kv head once per query head, bound by its L2 traffic), `compute: gemms`, `compute: attention`,
    `gpu: per-kernel overhead` (each kernel's fixed time on the GPU), and `<tier>: <collective>` for the transfers."""
    from narrowpath.cost.roofline import compute_time_s, l2_bw_bytes_per_s, memory_time_s
    dev, cal = cost.dev, cost.cal
    out: dict[str, float] = {}

    def add(k, v):
        out[k] = out.get(k, 0.0) + v

    for op, n in ops:
        c, m = compute_time_s(op, dev, cal), memory_time_s(op, dev, cal)
        add("gpu: per-kernel overhead", n * op.kernels * cal.kernel_overhead_s)
        if c >= m:
            add("compute: attention" if op.kind == "flash" else "compute: gemms" if op.kind == "matrix"
                else "compute: element-wise", n * c)
            continue
        if op.l2_bytes and dev.has_level("l2") \
                and op.l2_bytes / l2_bw_bytes_per_s(dev) >= op.hbm_bytes / dev.hbm.bw_bytes_per_s:
            add(L2_REREAD_KEY, n * m)  # a per-query-head decode kernel streaming the cache from L2
            continue
        w = op.weight_bytes  # a sliding-window layer reads less than the whole context: at most the op's own bytes
        kv = min(kv_read_bytes_per_layer_op, max(0.0, op.hbm_bytes - w)) if op.name == "attn_decode" else 0.0
        act = max(0.0, op.hbm_bytes - w - kv)
        for k, b in (("hbm: weights", w), ("hbm: kv cache", kv), ("hbm: activations", act)):
            if b > 0 and op.hbm_bytes > 0:
                add(k, n * m * b / op.hbm_bytes)
    for pt in transfers:
        add(f"{pt.cost.bottleneck_tier}: {pt.transfer.op}", pt.cost.time_s * pt.count)
    return out
