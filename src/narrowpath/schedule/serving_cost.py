"""Time of one serving iteration of one lane: the workload's serving ops priced by the roofline (cost.roofline),
its transfers by cost.collectives on the groups network.placement lays out — the same physics and the same
calibration profile as a training step.

A lane is one micro-batch of one attention data-parallel rank: with pp stages, pp micro-batches are in flight
(one per stage) and a lane's iteration takes the sum of its stage times and hand-offs, but a stage cannot take a
new micro-batch before finishing the other pp − 1, so a lane's period is max(Σ stages, pp · slowest stage)
(GPipe-style steady state, Huang et al. 2019; TensorRT-LLM pipeline-parallel in-flight batching).

The ops that depend only on the token count T (projections, MLPs and experts, norms, collectives) are priced once
on a grid of T and interpolated (each op's time is max of two affine functions of T plus a constant, so the sum is
piecewise linear); the attention core (context length) and the output layer (sequences producing a token) are
priced per iteration. Under a stack that runs prompt iterations eagerly (TensorRT-LLM's PyTorch backend) such an
iteration runs at the host's pace if that is slower (profile `host_dispatch_s` per kernel); decode-only iterations
replay a captured CUDA graph and in-flight-batching engines enqueue ahead, so the host does not bind them. A static
session that synchronises on every step before enqueuing the next (stack `host_sync_per_step`: TensorRT-LLM
0.x GptSession, whose generation loop calls shouldStopSync — decoder.forwardSync() — before executeContext of the
next step, cpp/tensorrt_llm/runtime/gptSession.cpp, CUDA graphs off by default) adds the host's enqueue of every
kernel (`host_dispatch_s` each) to each step: the GPU idles while the host launches (one launch a stage when the
step replays a captured CUDA graph: `graph_launch_s`). A stack that captures its
decode graphs for a fixed list of batch sizes (`graph_batch_sizes`) runs a decode-only iteration on the graph of the
next captured size up, the empty slots computed as one-token dummy sequences (`graph_padding`), or eagerly when no
graph fits (`graph_batch`). An engine whose step is synchronous (stack `host_serial`: vLLM's V0 LLMEngine.step —
schedule, prepare inputs, run, wait for the sampled tokens, process the outputs) adds its per-request bookkeeping to
the GPU time instead of hiding it behind the GPU. The profile's
`host_sync_s` (a host synchronisation per dropless MoE layer in Megatron training) does not apply: serving MoE
kernels keep the routing on the device.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from narrowpath.catalog import calibration_for
from narrowpath.catalog.serving import serving_stack
from narrowpath.cost.collectives import CollectiveCost, collective_time, p2p_all_reduce_time
from narrowpath.cost.power import capped_device
from narrowpath.cost.roofline import op_time_s
from narrowpath.cost.serving_memory import kv_footprint_tokens
from narrowpath.network.placement import GroupSpan, group_span, span_of
from narrowpath.schedule.serving_place import handoff_scale_out_share
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.serving import ServingPlan, ServingScenario
from narrowpath.workload.items import Op, Transfer
from narrowpath.workload.serving import (Formats, decode_attention_op, decode_shares_kv, embedding_op, head_ops,
                                         instance_plan, kv_bytes_per_token, kv_group_reads, layer_kind,
                                         layer_token_ops, prefill_attention_op, prefix_rebuild_op,
                                         stage_layers, window_kv_share)
from narrowpath.workload.serving_comm import (kv_handoff_bytes_per_gpu, layer_transfers, logits_transfer,
                                              stage_boundary_transfer)


def token_grid(max_tokens: int) -> np.ndarray:
    """Token counts the T-dependent costs are priced at: every count to 8, then steps of 25 %."""
    pts = list(range(1, 9))
    x = 8.0
    while x < max_tokens:
        x = min(float(max_tokens), x * 1.25)
        pts.append(int(round(x)))
    return np.unique(np.asarray(pts, dtype=float))


def graph_settings(plan: ServingPlan, stack: dict) -> tuple[tuple[int, ...], bool]:
    """(configured decode graph sizes, padding) of a serving plan: the plan's own, else its serving stack's (an
    empty list: the engine is not held to captured sizes)."""
    padding = bool(stack.get("graph_padding")) if plan.graph_padding is None else plan.graph_padding
    return tuple(plan.graph_batch_sizes or stack.get("graph_batch_sizes") or ()), padding


def captured_graph_sizes(sizes: list[int], max_batch: int, max_num_tokens: int, tokens_per_request: int,
                         padding: bool) -> list[int]:
    """Decode batch sizes an engine captures CUDA graphs for: the configured sizes a pure decode batch can reach
    (≤ max_batch and ≤ max_num_tokens / tokens per request), plus that ceiling itself when padding is on and a
    larger size was configured — 'if the user is OK padding to a batch size B, they should also be OK with padding
    to some size B' < B' (TensorRT-LLM 1.0 `_filter_cuda_graph_batch_sizes`,
    tensorrt_llm/_torch/pyexecutor/model_engine.py). A limit of 0 (not yet chosen) bounds nothing."""
    bounds = [b for b in (int(max_batch), int(max_num_tokens) // max(1, int(tokens_per_request))) if b > 0]
    ceiling = min(bounds) if bounds else max(int(x) for x in sizes)
    out: list[int] = []
    for b in sorted(int(x) for x in sizes):
        if b <= ceiling:
            out.append(b)
            continue
        if padding and (not out or out[-1] != ceiling):
            out.append(ceiling)
        break
    return out


def graph_batch(decodes: float, captured: list[int], padding: bool) -> int | None:
    """Batch size a decode-only iteration of `decodes` sequences runs at on a captured graph: itself when captured,
    else (padding on) the next captured size up, the empty slots filled with one-token dummy requests; None when no
    graph fits and the iteration runs eagerly (TensorRT-LLM 1.0 `_get_padded_batch` / `_maybe_get_cuda_graph`: a
    batch above the largest captured size, or not captured without padding). The waste is up to 50 % of a
    decode iteration's rows with a doubling size list (TensorRT-LLM tech blog 20, 'Tuning CUDA Graph Batch Sizes
    for Higher Output Throughput': finer sizes above 128 gave up to 1.3× output throughput aggregated, 1.5×
    disaggregated, DeepSeek-R1 on GB200)."""
    i = bisect_left(captured, decodes)
    if i == len(captured):
        return None
    if captured[i] == decodes:
        return captured[i]
    return captured[i] if padding else None


def finer_graph_sizes(limit: int) -> tuple[int, ...]:
    """TensorRT-LLM tech blog 20's '+64' list, which became the engine's default with padding: 1, 2, 4, every 8 to
    128, then every 64 from 192 to 2,048 ('reduces the maximum per-step padding from 1024 to 63 tokens'), continued
    every 64 up to `limit` when the batch limit is higher, and the limit itself when it falls between two steps."""
    sizes = [1, 2, 4] + list(range(8, 129, 8)) + list(range(192, max(2048, int(limit)) + 1, 64))
    if limit > sizes[-1]:  # a limit between two steps: a graph of its own, so the top batches do not run eagerly
        sizes.append(int(limit))
    return tuple(sizes)


def pp_serial_period_s(stage_s: list[float], host_s: float) -> float:
    """Period of a micro-batch under a pipeline loop that waits for each stage's forward before its host work
    (TensorRT-LLM 1.0 PyExecutor._executor_loop_pp: a non-last rank's `_forward_step_inter_pp` ends in
    `sampler_event.synchronize()`, then receives the next micro-batch's tokens, updates and answers the oldest one's
    requests and schedules the next before launching it; pp micro-batches in flight, one per rank at a time): each
    rank spends its stage's GPU time plus `host_s` per micro-batch in turn, so a micro-batch comes round every
    pp · (slowest stage + host_s), which is never less than its own pass through all stages. Every rank's loop
    does the bookkeeping of every request (TensorRT-LLM keeps each request's state on every pp rank); the 29 µs a
    request of trtllm-bench's stack was measured at pp 1 and includes the sampler's post-processing, which only the
    last rank runs — charging all of it to every rank is this formula's one assumption."""
    return len(stage_s) * (max(stage_s) + host_s)


def host_bookkeeping_s(per_request_s: float, requests: float, pp: int = 1) -> float:
    """Host time a Python executor loop spends per iteration on the requests of one lane — scheduling, input
    preparation, sampler post-processing and response handling, request by request. Under an overlap scheduler
    (TensorRT-LLM PyExecutor) it runs while the GPU executes the previous iteration, so the iteration takes
    max(GPU time, this); with pp stages each rank's loop handles all pp micro-batches in turn, so a lane's period
    is at least pp times one micro-batch's bookkeeping. per_request_s comes from the serving stack."""
    return per_request_s * requests * pp


@dataclass(frozen=True, slots=True)
class PricedTransfer:
    transfer: Transfer
    count: float
    span: GroupSpan
    cost: CollectiveCost


class ServingCost:
    """Prices iterations of one lane of a resolved serving scenario (plan knobs all set)."""

    def __init__(self, scn: ServingScenario, max_tokens: int, calibration: Calibration | None = None):
        self.scn = scn
        self.cal = calibration or scn.calibration or calibration_for(scn.system.device.name)
        m, p, sysm = scn.model, scn.plan, scn.system
        self.dev = capped_device(sysm)  # a power cap slows the arithmetic, as in training (cost.power)
        self.f = Formats.of(p, "fp8" in self.dev.peak_matrix_flop_per_s, m)
        self.layout = instance_plan(p)
        stack = serving_stack(p.framework)
        self.eager_prefill = bool(stack.get("eager_prefill", False))
        self._graph_list, self.graph_padding = graph_settings(p, stack)
        self.graph_sizes = (captured_graph_sizes(self._graph_list, p.max_batch, p.max_num_tokens, 1 + p.spec_tokens,
                                                 self.graph_padding) if self._graph_list else None)
        """Captured decode batch sizes, the plan's else the stack's (None: decode iterations are not held to a
        size list)."""
        sync = stack.get("host_per_request_sync_s") if p.pp > 1 or p.spec_tokens else None
        self.host_per_request_s = float(stack.get("host_per_request_s", 0.0) if sync is None else sync)
        """Host time per request an iteration handles; a stack's `host_per_request_sync_s` where the engine turns
        its output processing's overlap off, pp > 1 or speculative decoding (vLLM V0's asynchronous output
        processor, ModelConfig.verify_async_output_proc)."""
        self.p2p_all_reduce = bool(stack.get("p2p_all_reduce", False))
        """The engine all-reduces inside one scale-up domain with its one-shot peer-to-peer kernel when that beats
        NCCL (cost.collectives.p2p_all_reduce_time)."""
        self.host_serial = bool(stack.get("host_serial", False))
        """The executor's per-request work runs between iterations, not beside them (vLLM's V0 engine: step() =
        schedule, prepare inputs, run the model, wait for the sampled tokens, process the outputs, on one thread):
        an iteration takes its GPU time (or its eager dispatch, if longer) plus the bookkeeping."""
        self.pp_host_serial = bool(stack.get("pp_host_serial", False)) or self.host_serial
        per_head = bool(stack.get("decode_kv_per_query_head", False))
        self.kv_reads = kv_group_reads(m, p, not per_head and decode_shares_kv(m, p, stack.get("xqa_shapes")))
        """Reads of a kv head's cache per decode (workload.serving.kv_group_reads): the group's query heads when the
        engine's generation kernel gives each its own block — always (stack decode_kv_per_query_head), or for the
        models its XQA kernels do not take (stack xqa_shapes)."""
        self.kv_reread = "hbm" if per_head else "l2"
        """Where those repeated reads come from (workload.serving.decode_attention_op): HBM for TensorRT-LLM 0.5/0.6's
        masked multi-head attention, L2 for the 0.7-0.9 line's (0.7.1's notes list an 'MMHA optimization for MQA and
        GQA'; the 0.7.0 and 0.7a builds the same entry matches are priced alike)."""
        self.exchange = str(stack.get("moe_exchange", "all_to_all"))
        self.stages = stage_layers(m, p.pp)
        self.kinds = [[layer_kind(m, i) for i in layers] for layers in self.stages]
        self._spans: dict[str, GroupSpan] = {}
        self._coll: dict[tuple, CollectiveCost] = {}
        self.grid = token_grid(max(8, int(max_tokens)))
        self.tok_s = np.array([[self._token_time(s, T) for T in self.grid] for s in range(p.pp)])
        self.head_s = np.array([self._head_time(n) for n in self.grid])
        self.kernels = np.array([sum(op.kernels * c for op, c in self.token_ops(s, 8.0)) for s in range(p.pp)])
        head_kernels = sum(op.kernels for op, _ in self.head(1.0)[0])
        self.stage_kernels = [float(self.kernels[s]) + len(self.stages[s]) + (head_kernels if s == p.pp - 1 else 0.0)
                              for s in range(p.pp)]
        """Kernels a stage's host issues per iteration: its layer ops, one attention core per layer and, on the last
        stage, the output layer."""
        self.kv_bytes_per_token = max(kv_bytes_per_token(m, p, layers) for layers in self.stages)
        self.launch_s = self._launch_times() if stack.get("host_sync_per_step") else None
        self.graph_launch_s = [self.cal.host_dispatch_s] * p.pp if self.launch_s is not None else None
        """A static session's serial launch of a decode step it replays as a captured CUDA graph: one launch a
        stage (TensorRT-LLM 0.x GptSession with CUDA graphs on — gptSessionBenchmark --enable_cuda_graph — captures
        the generation step and replays it, still after the previous step's synchronisation)."""
        self._handoff: dict = {}
        self._affine = [self._attention_lines(s) for s in range(p.pp)]
        self._attention_stage = [next(r for r in range(s + 1) if self._affine[r] == self._affine[s]
                                      and self.kinds[r] == self.kinds[s]) for s in range(p.pp)]
        """Per stage, the first stage whose attention cores are the same (priced once per iteration)."""
        self._g, self._tok, self._head = self.grid.tolist(), [row.tolist() for row in self.tok_s], self.head_s.tolist()

    def for_limits(self, max_batch: int, max_num_tokens: int) -> "ServingCost":
        """This cost model under other batch limits (a search prices one layout for all its batch limits): the
        same prices, the captured graph sizes those limits keep. Itself when they keep the same sizes."""
        if not self._graph_list:
            return self
        sizes = captured_graph_sizes(self._graph_list, max_batch, max_num_tokens, 1 + self.scn.plan.spec_tokens,
                                     self.graph_padding)
        if sizes == self.graph_sizes:
            return self
        other = copy.copy(self)
        other.graph_sizes = sizes
        return other

    def decode_rows(self, decodes: float) -> float:
        """Sequences a decode-only iteration of `decodes` computes: its captured graph's size when padded."""
        graph = self.decode_graph(decodes)
        return decodes if graph is None else graph

    def decode_graph(self, decodes: float) -> float | None:
        """Batch a decode-only iteration of `decodes` sequences runs at: its captured graph's size (itself, or the next
        size up with padding), itself when the engine is not held to captured sizes, None when it runs eagerly (a
        list of sizes and none fits: `graph_batch`)."""
        if self.graph_sizes is None or not decodes:
            return decodes
        return graph_batch(decodes, self.graph_sizes, self.graph_padding)

    # ---- work items ---------------------------------------------------------------------------------------
    def token_ops(self, stage: int, T: float) -> list[tuple[Op, float]]:
        """T-dependent ops of one stage (its layers, and the embedding on the first stage), with counts."""
        m, p = self.scn.model, self.scn.plan
        out: list[tuple[Op, float]] = []
        for kind in set(self.kinds[stage]):
            n = self.kinds[stage].count(kind)
            out += [(op, float(n)) for op in layer_token_ops(m, p, self.f, T, kind[0], self.exchange)]
        if stage == 0:
            out.append((embedding_op(m, T), 1.0))
        return out

    def token_transfers(self, stage: int, T: float) -> list[PricedTransfer]:
        """T-dependent transfers of one stage per iteration: the layers' collectives and the hand-off of the
        activations to the next stage."""
        m, p = self.scn.model, self.scn.plan
        out = []
        for kind in set(self.kinds[stage]):
            n = self.kinds[stage].count(kind)
            ep = self.span("ep") if m.moe is not None and p.ep > 1 else None
            for tr, c in layer_transfers(m, p, self.f, T, kind[0], ep.domains if ep else 1,
                                         ep.ranks_per_domain if ep else 1, self.exchange):
                out.append(self._priced(tr, c * n))
        if stage < p.pp - 1:
            out.append(self._priced(stage_boundary_transfer(m, T), 1.0, self._boundary_span(stage)))
        return out

    def attention_ops(self, stage: int, dec_seqs: float, dec_ctx: float, pre_tokens: float, pre_pairs: float,
                      pre_ctx: float, queries_per_seq: float = 1.0, rebuild_prefix: bool = True
                      ) -> list[tuple[Op, float]]:
        """Attention cores of one stage: decodes over their contexts, prompt chunks over theirs (a sliding-window
        layer sees at most the window per sequence / query) — `pre_ctx` = Σ (p + c) over chunks of c tokens after
        p cached ones — and, for multi-head latent attention (`rebuild_prefix`), the up-projection that rebuilds
        the cached prefix's keys and values, Σ p = pre_ctx − pre_tokens tokens (workload.serving.prefix_rebuild_op)."""
        m, p, f = self.scn.model, self.scn.plan, self.f
        out = []
        n_win = sum(1 for k in self.kinds[stage] if k[1])
        n_full = len(self.kinds[stage]) - n_win
        W = m.sliding_window
        for n, window in ((n_full, False), (n_win, True)):
            if not n:
                continue
            dctx = min(dec_ctx, dec_seqs * W) if window else dec_ctx
            pairs = min(pre_pairs, pre_tokens * W) if window else pre_pairs
            pctx = min(pre_ctx, pre_tokens + W) if window else pre_ctx
            if dec_seqs:
                out.append((decode_attention_op(m, p, f, dec_seqs, dctx, queries_per_seq, self.kv_reads,
                                                self.kv_reread), float(n)))
            if pre_tokens:
                out.append((prefill_attention_op(m, p, f, pre_tokens, pairs, pctx), float(n)))
                if rebuild_prefix:
                    out += self._rebuild(n, pre_tokens, pctx)
        return out

    def _rebuild(self, layers: int, pre_tokens: float, pre_ctx: float) -> list[tuple[Op, float]]:
        """The prefix rebuild of `layers` layers whose prompt chunks read `pre_ctx` context tokens (Σ p = pre_ctx −
        pre_tokens of them cached ahead): [] but for multi-head latent attention with a prefix."""
        op = prefix_rebuild_op(self.scn.model, self.scn.plan, self.f, pre_ctx - pre_tokens)
        return [(op, float(layers))] if op is not None else []

    def head(self, rows: float) -> tuple[list[tuple[Op, float]], list[PricedTransfer]]:
        """Output-layer ops and the logits all-gather of the last stage for `rows` sequences."""
        m, p = self.scn.model, self.scn.plan
        ops = [(op, 1.0) for op in head_ops(m, p, rows)]
        tr = logits_transfer(m, p, rows)
        return ops, ([self._priced(tr, 1.0)] if tr is not None else [])

    # ---- pricing ------------------------------------------------------------------------------------------
    def span(self, axis: str) -> GroupSpan:
        """Span of a group of the instance layout; `ep_inter` / `ep_intra` are the two legs of a deduplicating
        dispatch (the ep ranks of one local index across domains, the ep ranks inside one domain), as
        schedule.step prices them."""
        if axis not in self._spans:
            if axis in ("ep_inter", "ep_intra"):
                ep = self.span("ep")
                self._spans[axis] = span_of(ep.domains, ranks_per_domain=1, domains=ep.domains, axis=axis) \
                    if axis == "ep_inter" else span_of(ep.ranks_per_domain, ranks_per_domain=ep.ranks_per_domain,
                                                       domains=1, axis=axis)
            else:
                self._spans[axis] = group_span(self.layout, self.scn.system, axis)
        return self._spans[axis]

    def _boundary_span(self, stage: int) -> GroupSpan:
        """Neighbouring stages' GPUs (stride tp·dp apart): inside one scale-up domain or across the fabric. Stage k
        holds ranks k·stride … (k + 1)·stride − 1 and each sends to the rank `stride` above it; the boundary is as
        slow as its slowest pair, which crosses a domain edge when one lies in (k·stride, (k + 2)·stride − 1]."""
        stride, dom = self.scn.plan.tp * self.scn.plan.dp, self.scn.system.job_domain(self.layout.num_gpus)
        same = (stage * stride) // dom == ((stage + 2) * stride - 1) // dom
        return span_of(2, ranks_per_domain=2 if same else 1, domains=1 if same else 2, axis="pp")

    def _priced(self, tr: Transfer, count: float, span: GroupSpan | None = None) -> PricedTransfer:
        span = span or self.span(tr.axis)
        key = (tr.op, span, tr.message_bytes)
        if key not in self._coll:
            if tr.op == "all_reduce" and self.p2p_all_reduce:
                self._coll[key] = p2p_all_reduce_time(tr.message_bytes, span, self.scn.system, self.cal)
            else:
                self._coll[key] = collective_time(tr.op, tr.message_bytes, span, self.scn.system, self.cal)
        return PricedTransfer(tr, count, span, self._coll[key])

    def op_s(self, ops: list[tuple[Op, float]]) -> float:
        return sum(op_time_s(op, self.dev, self.cal) * c for op, c in ops)

    def _launch_times(self) -> list[float]:
        """Host time to enqueue one iteration of each stage, kernel by kernel (the profile's host_dispatch_s per
        kernel): the stage's layer ops, one attention core per layer and, on the last stage, the output layer."""
        return [k * self.cal.host_dispatch_s for k in self.stage_kernels]

    def _head_time(self, rows: float) -> float:
        ops, trs = self.head(rows)
        return self.op_s(ops) + sum(pt.cost.time_s for pt in trs)

    def _attention_lines(self, stage: int) -> list | None:
        """Per attention op of the stage: (count, which, FLOP and byte coefficients, compute line, overhead), so
        that its roofline time is max(c0 + c1·F, B / bw, L / l2bw) + overhead with F, B and L (a decode's L2
        re-reads, Op.l2_bytes) linear in the iteration's sizes.
        The lines are read off cost.roofline at two sizes: exact for the profile's saturating GEMM ramp, whose
        time (F + F_half) / (peak · eff_max) is affine in F. None (price each op) when the profile has a measured
        efficiency table, which is not affine."""
        from narrowpath.cost.roofline import compute_time_s, matrix_table, memory_time_s
        if matrix_table(self.f.core, self.cal):
            return None
        lines = []
        ops = functools.partial(self.attention_ops, stage, rebuild_prefix=False)  # the cores; attention_s adds it
        base = ops(1.0, 1.0, 0.0, 0.0, 0.0) + ops(0.0, 0.0, 1.0, 1.0, 1.0)
        probe = ops(2.0, 3.0, 0.0, 0.0, 0.0) + ops(0.0, 0.0, 2.0, 3.0, 5.0)
        for (op1, n), (op2, _) in zip(base, probe):
            # the op itself scaled up (its head width and exponentials per FLOP kept: both rate it linearly)
            big, big2 = (dataclasses.replace(op1, flop=op1.flop * k, exps=op1.exps * k, hbm_bytes=1.0, kernels=1)
                         for k in (1e6, 2e6))
            c_big, c_2big = compute_time_s(big, self.dev, self.cal), compute_time_s(big2, self.dev, self.cal)
            c1 = (c_2big - c_big) / (op1.flop * 1e6)
            c0 = c_big - c1 * op1.flop * 1e6
            bw = memory_time_s(Op(op1.name, "vector", "fwd", 0.0, 1.0, op1.dtype), self.dev, self.cal)
            l2w = memory_time_s(Op(op1.name, "vector", "fwd", 0.0, 0.0, op1.dtype, l2_bytes=1.0), self.dev, self.cal)
            if op1.name == "attn_decode":  # F = f·ctx·q; B = b_ctx·ctx + b_q·seqs·q  (from sizes 1,1 and 2,3)
                f = op1.flop
                b_q = op2.hbm_bytes - 3 * op1.hbm_bytes  # 3·b_ctx + 2·b_q − 3·(b_ctx + b_q) = −b_q
                b_q = -b_q
                b_ctx = op1.hbm_bytes - b_q
                # L2 re-reads of a per-query-head kernel: l2 = l2_ctx · ctx (Op.l2_bytes at context 1)
                lines.append((n, "dec", f, b_ctx, b_q, c0, c1, bw, self.cal.kernel_overhead_s, op1.l2_bytes, l2w))
            else:  # F = f·pairs; B = b_ctx·pctx + b_tok·tokens  (from (1,1,1) and (2,3,5))
                f = op1.flop
                b_ctx = (op2.hbm_bytes - 2 * op1.hbm_bytes) / 3.0
                b_tok = op1.hbm_bytes - b_ctx
                lines.append((n, "pre", f, b_ctx, b_tok, c0, c1, bw, self.cal.kernel_overhead_s, 0.0, l2w))
        return lines

    def attention_s(self, stage: int, dec_seqs: float, dec_ctx: float, pre_tokens: float, pre_pairs: float,
                    pre_ctx: float, q: float = 1.0) -> float:
        """Attention-core time of one stage (the roofline of `attention_ops`, via the affine lines when exact)."""
        lines = self._affine[stage]
        if lines is None or self.scn.model.sliding_window:
            return self.op_s(self.attention_ops(stage, dec_seqs, dec_ctx, pre_tokens, pre_pairs, pre_ctx, q))
        t = 0.0
        for n, which, f, b1, b2, c0, c1, bw, ovh, l2c, l2w in lines:
            if which == "dec":
                if dec_seqs:
                    F = f * dec_ctx * q
                    t += n * (max(c0 + c1 * F if F > 0 else 0.0, (b1 * dec_ctx + b2 * dec_seqs * q) * bw,
                                  l2c * dec_ctx * l2w) + ovh)
            elif pre_tokens:
                F = f * pre_pairs
                t += n * (max(c0 + c1 * F if F > 0 else 0.0, (b1 * pre_ctx + b2 * pre_tokens) * bw) + ovh)
        if pre_tokens:  # the lines price the cores; no layer here has a window (those take the ops above)
            t += self.op_s(self._rebuild(len(self.kinds[stage]), pre_tokens, pre_ctx))
        return t

    def _token_time(self, stage: int, T: float) -> float:
        return self.op_s(self.token_ops(stage, T)) + sum(pt.cost.time_s * pt.count
                                                        for pt in self.token_transfers(stage, T))

    def token_time_s(self, stage: int, T: float) -> float:
        """T-dependent time of one stage, interpolated on the grid (linear beyond its end)."""
        return _interp(T, self._g, self._tok[stage])

    def head_time_s(self, rows: float) -> float:
        """Output layer and logits gather of the last stage for `rows` sequences (grid-interpolated)."""
        return _interp(rows, self._g, self._head)

    def iteration_s(self, T: float, dec_seqs: float, dec_ctx: float, pre_tokens: float = 0.0,
                    pre_pairs: float = 0.0, pre_ctx: float = 0.0, rows: float | None = None,
                    queries_per_seq: float = 1.0, requests: float | None = None, extra_gpu_s: float = 0.0) -> float:
        """Period of one lane iteration of T tokens: `dec_seqs` decodes holding `dec_ctx` context tokens,
        `pre_tokens` prompt tokens with `pre_pairs` causal query-key pairs over `pre_ctx` context, `rows`
        sequences producing a token (default: the decodes), `requests` the executor handles this iteration (default:
        the larger of decodes and rows), `extra_gpu_s` more GPU work in the same iteration (draft passes).

        GPU time: the stages' sum, or pp × the slowest stage when that is longer (GPipe steady state). Host time on
        the executor's thread, overlapped with the GPU: the per-request bookkeeping (`host_bookkeeping_s`) plus, in
        an eager prompt iteration, the framework's kernel-by-kernel dispatch of every kernel the stage issues
        (`stage_kernels`; with pp > 1 each rank's host issues its own stage, which then runs no faster than that);
        the iteration takes the longer of the two — or, under a synchronous step (`host_serial`), the GPU's time
        (or the eager issue, if longer) plus the bookkeeping. A decode-only iteration under a stack with captured
        graph sizes runs at its graph's size (`graph_batch`: the padding's dummy sequences cost tokens, one context
        token each and output rows; the host's bookkeeping stays with the real requests) or, with no graph to fit,
        eagerly as a prompt iteration does. Under a pipeline loop that waits on each stage before its host
        work (`pp_host_serial`, which a synchronous step implies) a micro-batch comes round every
        pp · (slowest stage + bookkeeping)
        (`pp_serial_period_s`). A static session that enqueues only after the previous step (`launch_s`) adds its
        host time instead."""
        return self.context_line(T, dec_seqs, pre_tokens, rows, queries_per_seq, requests, extra_gpu_s)(
            dec_ctx, pre_pairs, pre_ctx)

    def iteration_parts(self, T: float, dec_seqs: float, dec_ctx: float, pre_tokens: float = 0.0,
                        pre_pairs: float = 0.0, pre_ctx: float = 0.0, rows: float | None = None,
                        queries_per_seq: float = 1.0, requests: float | None = None,
                        extra_gpu_s: float = 0.0, graph: bool | None = None) -> dict[str, float]:
        """`iteration_s` taken apart, its parts summing to it: `gpu` (the GPU period of the real work), `padding`
        (what a decode graph's dummy sequences add), `launch` (a static session's serial enqueue), `host` (the
        executor's per-request work beyond the GPU's, or all of it under a serial pipeline loop) and `dispatch`
        (an eager iteration's kernel-by-kernel issue beyond both). Each part is the iteration's time with one more
        of them switched on, in that order. `graph` (decode-only iterations): as context_line."""
        args = (T, dec_seqs, pre_tokens, rows, queries_per_seq, requests, extra_gpu_s)
        at = (dec_ctx, pre_pairs, pre_ctx)
        steps = [self.context_line(*args, pad=False, launch=False, host=False, eager=False, graph=graph)(*at),
                 self.context_line(*args, launch=False, host=False, eager=False, graph=graph)(*at),
                 self.context_line(*args, host=False, eager=False, graph=graph)(*at),
                 self.context_line(*args, eager=False, graph=graph)(*at),
                 self.context_line(*args, graph=graph)(*at)]
        return {"gpu": steps[0], "padding": steps[1] - steps[0], "launch": steps[2] - steps[1],
                "host": steps[3] - steps[2], "dispatch": steps[4] - steps[3]}

    def context_line(self, T: float, dec_seqs: float, pre_tokens: float = 0.0, rows: float | None = None,
                     queries_per_seq: float = 1.0, requests: float | None = None, extra_gpu_s: float = 0.0,
                     *, pad: bool = True, launch: bool = True, host: bool = True, eager: bool = True,
                     graph: bool | None = None):
        """`iteration_s` with its context-independent part priced once: a function of (dec_ctx, pre_pairs=0,
        pre_ctx=0) equal to iteration_s(T, dec_seqs, dec_ctx, pre_tokens, pre_pairs, pre_ctx, rows, ...) — the
        lanes price runs of decode steps that differ only in their context this way. Switching `pad`, `launch`,
        `host` or `eager` off drops the graph padding, a static session's serial launch, the executor's host work
        or an eager iteration's kernel dispatch (`iteration_parts`). `graph` True / False prices a decode-only
        iteration as replaying a captured graph of its own size (no padding) / as eager, whatever the size list
        says (an account's mean batch is not a whole batch); None decides from the list."""
        pp = self.scn.plan.pp
        with_dispatch = eager
        eager = bool(pre_tokens and self.eager_prefill and self.cal.host_dispatch_s)  # the host issues each kernel
        rows = dec_seqs if rows is None else rows
        requests = max(dec_seqs, rows) if requests is None else requests
        with_pad, pad, graphed = pad, 0.0, False
        if self.graph_sizes is not None and dec_seqs and not pre_tokens:  # a decode-only iteration: a graph's size
            padded = self.decode_graph(dec_seqs) if graph is None else (dec_seqs if graph else None)
            graphed = padded is not None
            if padded is None:  # no captured graph fits: the framework issues every kernel, whatever the engine
                eager = bool(self.cal.host_dispatch_s)
            elif padded > dec_seqs and with_pad:  # dummy one-token sequences fill the graph's empty slots
                pad = padded - dec_seqs
                T, rows, dec_seqs = T + pad * queries_per_seq, rows + pad, padded
        eager = eager and with_dispatch
        with_host = host
        host = host_bookkeeping_s(self.host_per_request_s, requests, pp) if with_host else 0.0
        launch = (self.graph_launch_s if graphed else self.launch_s) if launch else None
        attention_s, q = self.attention_s, queries_per_seq
        if pp == 1:
            tok, head = self.token_time_s(0, T), self.head_time_s(rows)

            def gpu(dec_ctx: float, pre_pairs: float = 0.0, pre_ctx: float = 0.0) -> float:
                return tok + attention_s(0, dec_seqs, dec_ctx + pad if pad else dec_ctx, pre_tokens, pre_pairs,
                                         pre_ctx, q) + head + extra_gpu_s
            if launch is not None:  # the host enqueues the step only once the previous one has finished
                first = launch[0]
                return lambda dec_ctx, pre_pairs=0.0, pre_ctx=0.0: gpu(dec_ctx, pre_pairs, pre_ctx) + first + host
            dispatch = self.stage_kernels[0] * self.cal.host_dispatch_s if eager else 0.0
            if self.host_serial:  # the bookkeeping waits for the GPU; the kernels are issued as it runs them
                return lambda dec_ctx, pre_pairs=0.0, pre_ctx=0.0: max(gpu(dec_ctx, pre_pairs, pre_ctx), dispatch) \
                    + host
            host += dispatch  # the same thread issues the kernels and does the bookkeeping
            return lambda dec_ctx, pre_pairs=0.0, pre_ctx=0.0: max(gpu(dec_ctx, pre_pairs, pre_ctx), host)
        toks = [self.token_time_s(s, T) for s in range(pp)]
        head = self.head_time_s(rows)
        floor = [self.stage_kernels[s] * self.cal.host_dispatch_s for s in range(pp)] if eager else None
        serial = host_bookkeeping_s(self.host_per_request_s, requests) if self.pp_host_serial and with_host else None

        same = self._attention_stage

        def at(dec_ctx: float, pre_pairs: float = 0.0, pre_ctx: float = 0.0) -> float:
            ctx = dec_ctx + pad if pad else dec_ctx
            stage_t, attn = [], []
            for s in range(pp):
                r = same[s]
                attn.append(attention_s(s, dec_seqs, ctx, pre_tokens, pre_pairs, pre_ctx, q) if r == s else attn[r])
                t = toks[s] + attn[s]
                if s == pp - 1:
                    t += head
                if floor is not None:  # a stage runs no faster than its rank's host issues its kernels
                    t = max(t, floor[s])
                stage_t.append(t + (launch[s] if launch is not None else 0.0))
            if serial is not None:  # the host's work per micro-batch sits between its stages' forwards
                return pp_serial_period_s(stage_t, serial) + extra_gpu_s
            gpu = max(sum(stage_t), pp * max(stage_t)) + extra_gpu_s
            return max(gpu, host)
        return at

    def handoff_s(self, prompt_tokens: int, sender: "ServingCost | None" = None,
                  scale_out_share: float | None = None) -> float:
        """Disaggregated serving: mean time to move one prompt's KV cache from a prefill instance (`sender`'s
        layout; None: this one's) to a decode instance of this layout — over the scale-up fabric for a pair in one
        domain, over the scale-out NICs for the `scale_out_share` of hand-offs that cross domains (the deployment's
        placement, schedule.serving_place; None: one instance of each, laid out alike)."""
        src = self if sender is None else sender
        p, sysm = self.scn.plan, self.scn.system
        if scale_out_share is None:
            scale_out_share = handoff_scale_out_share(1, src.scn.plan.instance_gpus, 1, p.instance_gpus,
                                                      sysm.scale_up_domain)
        key = (prompt_tokens, scale_out_share) if src is self else \
            (prompt_tokens, scale_out_share, src.kv_bytes_per_token, src.scn.plan.instance_gpus)
        if key not in self._handoff:
            m = self.scn.model  # sliding-window layers hand over only the window's KV
            held = kv_footprint_tokens(prompt_tokens, window_kv_share(m, list(range(m.layers))), m.sliding_window)
            nbytes = kv_handoff_bytes_per_gpu(src.kv_bytes_per_token, held, self.kv_bytes_per_token)
            t = 0.0
            for share, same in ((1.0 - scale_out_share, True), (scale_out_share, False)):
                if share > 0:
                    span = span_of(2, ranks_per_domain=2 if same else 1, domains=1 if same else 2, axis="kv")
                    t += share * collective_time("send_recv", nbytes, span, sysm, self.cal).time_s
            self._handoff[key] = t
        return self._handoff[key]


def _interp(x: float, g: list, y: list) -> float:
    """y(x) on the ascending grid g (lists, for speed on scalars), linear between points and beyond either end;
    0 at x ≤ 0."""
    if x <= 0:
        return 0.0
    i = bisect_left(g, x)
    if i == 0:
        i = 1
    elif i == len(g):
        i -= 1
    x0, x1 = g[i - 1], g[i]
    return y[i - 1] + (y[i] - y[i - 1]) * (x - x0) / (x1 - x0)
