"""The work plans share, priced once: each part of a step is computed by the same workload and cost functions
`predict` calls, for one representative plan per distinct value of the knobs that part reads, and reused by every
plan with those knobs.

Parts and the knobs they read (tests/search/test_parts.py varies every other knob and checks the part is unchanged):
    layer ops          one layer of a kind: tp, cp, mbs, sp, recompute (mode and selective modules), ZeRO-3
                       (re-quantized weights), ep, etp
                       (+ the base plan's precision, MoE routing, attention kernel, CUDA graphs and sync-free
                       MoE layers)
    layer comm         its tp/cp/ep traffic: the same + tp_comm_overlap, cp_comm, ep_overlap, ep_dispatch and, for a
                       deduplicating dispatch, the placement of the ep group (+ the base plan's dispatch format)
    layer ZeRO comm    zero stage, tp, cp, dp, ep, etp, dp_overlap, micro-batches
    embedding          first/last stage work: tp, cp, mbs, sp, recompute (MTP), ep, etp, pp = 1
    activations        bytes a layer keeps: tp, cp, mbs, sp, selective recompute and its modules, ep, etp
    collectives        per placement (tp, cp, dp, pp, ep, etp, placement order): `schedule.step._price` with the
                       placement's spans and contention, per (op, axis, message size)
Ops are interned by content, so two knob settings that produce the same ops (selective recompute of a module the
layer does not have) get the same part: the search uses that to show such plans once.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from narrowpath.catalog import calibration_for
from narrowpath.cost.memory import layer_activation_bytes
from narrowpath.cost.power import capped_device
from narrowpath.cost.roofline import host_time_s, op_time_s
from narrowpath.schedule.step import _price, _span
from narrowpath.search.table import replace_unchecked
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.scenario import Scenario
from narrowpath.workload import build as B
from narrowpath.workload.attention import kernel_of
from narrowpath.workload import transformer as T

PHASES = ("fwd", "bwd", "recompute")
AGG = ("comp", "host", "syncs", "gemm", "attn", "flop")
"""Per-phase sums of a list of ops, as predict accumulates them: GPU time, host issue time, host syncs, time of the
non-vector (matrix and flash) ops, time of the attention core, FLOPs."""
SLOT_NONE, SLOT_EXPOSED, SLOT_PHASE, SLOT_ATTENTION, SLOT_PAIR, SLOT_SHARE = 0, 1, 2, 3, 4, 5
"""How a transfer slot meets compute: padding, never hidden, hides behind its phase's matrix work, hides behind
its phase's attention core only, hides behind the merged pass of another micro-batch
(schedule.step.pass_pair_hidden_s), hides behind the matrix work of the share of micro-batches that run it
(ZeRO-2's per-micro-batch reduce-scatter: workload.items.Transfer `share`)."""
SUMS = 15
"""Width of a template's phase sums (Layout.phase_sums)."""


def _slot_type(tr) -> int:
    if not tr.overlappable:
        return SLOT_EXPOSED
    return {"attention": SLOT_ATTENTION, "pass_pair": SLOT_PAIR, "share": SLOT_SHARE}.get(tr.hides_behind, SLOT_PHASE)


class Template:
    """A list of transfers (with counts) as slots: what each needs priced, its phase, count and type."""

    __slots__ = ("transfers", "phase", "count", "type", "info")

    def __init__(self, xfers: list):
        self.transfers = [tr for tr, _ in xfers]
        self.info = np.array([(tr.axis in ("dp", "edp"), tr.op == "all_gather", tr.overlappable, tr.message_bytes)
                              for tr, _ in xfers], dtype=float).reshape(len(xfers), 4)
        """Per slot: a data-parallel axis?, an all-gather?, overlappable?, message bytes (the step's transfers)."""
        self.count = np.array([c for _, c in xfers], dtype=float)
        self.phase = np.array([PHASES.index(tr.phase) if tr.phase in PHASES else -1 for tr, _ in xfers],
                              dtype=np.int8)
        self.type = np.array([_slot_type(tr) for tr, _ in xfers], dtype=np.int8)


class Layout:
    """One placement of the ranks: a representative scenario and the caches `schedule.step._price` fills.

    Without contention (a fabric that is not oversubscribed) a transfer's cost is `collective_time` of its op and
    size on its group's span, the same on every placement where the span is: those are shared (`shared`)."""

    __slots__ = ("scn", "spans", "cache", "cal", "sums", "shared", "times")

    def __init__(self, scn: Scenario, cal: Calibration, shared: dict | None = None):
        self.scn, self.cal, self.spans, self.cache = scn, cal, {}, {}
        self.sums: dict[int, np.ndarray] = {}
        self.shared = shared
        self.times: dict[tuple, float] = {}
        """time_s by (op, axis, message bytes): what the price reads of a transfer (`_price`'s cache key)."""

    def time_s(self, tr) -> float:
        """Time of one transfer on this placement. The first answer for an (op, axis, size) is kept: what it comes
        from is fixed once set (`_price`'s cache and `shared` are written once per key; an axis's span, once
        computed, is only written again with the same span by search.layouts), so every later call would give
        it again."""
        k = (tr.op, tr.axis, tr.message_bytes)
        t = self.times.get(k)
        if t is None:
            t = self.times[k] = self._time_s(tr)
        return t

    def _time_s(self, tr) -> float:
        if self.shared is None or tr.axis == "host":
            return _price(tr, self.scn, self.cal, self.spans, self.cache).time_s
        key = (tr.op, tr.message_bytes, _span(self.scn, tr.axis, self.spans))
        t = self.shared.get(key)
        if t is None:
            t = self.shared[key] = _price(tr, self.scn, self.cal, self.spans, self.cache).time_s
        return t

    def send_s(self, tid: int, tm: "Template") -> np.ndarray:
        """(1,) the longest overlapped pipeline message of a template (what the pipeline's fill and drain wait for
        at every chunk boundary: schedule.pipeline.fill_drain_latency_s)."""
        k = ("send", tid)
        v = self.sums.get(k)
        if v is None:
            v = np.array([max([self.time_s(tr) for tr in tm.transfers if tr.axis == "pp" and tr.overlappable],
                              default=0.0)])
            self.sums[k] = v
        return v

    def phase_sums(self, tid: int, tm: "Template") -> np.ndarray:
        """(15,) sums of a stage template's transfer time on this placement: per phase (fwd, bwd, recompute) all
        of it, the part that hides behind the phase's matrix work, the part that hides behind its attention core,
        the part that hides behind another micro-batch's merged pass, the part that hides behind a share of the
        micro-batches' matrix work (what the closed form of the overlap needs,
        search.exact). Added up in Python floats, the same IEEE double sums as in the array's."""
        v = self.sums.get(tid)
        if v is None:
            acc = [0.0] * SUMS
            for tr, c, ph, ty in zip(tm.transfers, tm.count.tolist(), tm.phase.tolist(), tm.type.tolist()):
                t = self.time_s(tr) * c
                acc[ph] += t
                if ty == SLOT_PHASE:
                    acc[3 + ph] += t
                elif ty == SLOT_ATTENTION:
                    acc[6 + ph] += t
                elif ty == SLOT_PAIR:
                    acc[9 + ph] += t
                elif ty == SLOT_SHARE:
                    acc[12 + ph] += t
            v = self.sums[tid] = np.array(acc)
        return v


class Cells:
    """Values kept over a search for a grid of (row key, variant key) cells (search.exact.Exact._grid, one per
    part): each key gets an id the first time it is seen; `slot[row id, variant id]` is the cell's row of `vals`
    (−1: not seen yet; 0: zeros, a template without transfers). Cells with the same template on the same placement
    share a row."""

    def __init__(self, width: int):
        self.row_ids: dict[tuple, int] = {}
        self.var_ids: dict[tuple, int] = {}
        self.slot = np.full((64, 8), -1, dtype=np.int32)
        self.vals = np.zeros((64, width))
        self.n = 1
        self.of_pair: dict[tuple[int, int], int] = {}

    def lookup(self, rkeys: list, vkeys: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row ids, variant ids, (rows, variants) slots) of the keys (ids given to keys not seen before)."""
        r, v = _ids(rkeys, self.row_ids), _ids(vkeys, self.var_ids)
        R, V = self.slot.shape
        if len(self.row_ids) > R or len(self.var_ids) > V:
            grown = np.full((max(R, 2 * len(self.row_ids)), max(V, 2 * len(self.var_ids))), -1, dtype=np.int32)
            grown[:R, :V] = self.slot
            self.slot = grown
        return r, v, self.slot[r[:, None], v[None, :]]

    def add(self, lay: int, tid: int, tm: Template, price) -> int:
        """Row of `vals` of template `tid` on placement `lay`: price(tid, tm) (a Layout method) is stored there the
        first time the pair is seen."""
        s = self.of_pair.get((lay, tid))
        if s is None:
            if self.n == len(self.vals):
                self.vals = np.concatenate([self.vals, np.zeros_like(self.vals)])
            self.vals[self.n] = price(tid, tm)
            s = self.of_pair[(lay, tid)] = self.n
            self.n += 1
        return s


def _ids(keys: list, known: dict) -> np.ndarray:
    """The id of every key in `known`, the next free one for a key not in it yet."""
    return np.fromiter((known.setdefault(k, len(known)) for k in keys), dtype=np.int64, count=len(keys))


class Parts:
    """Caches of the parts of a step for one search (one model, system, GPU count, base plan, calibration)."""

    def __init__(self, base: Scenario, calibration: Calibration | None):
        self.base = base
        self.cal = calibration or base.calibration or calibration_for(base.system.device.name)
        plan = base.plan
        self.kernel = kernel_of(plan.attention, self.cal.attention_kernel)
        self.dev = capped_device(base.system)
        self.kinds = sorted(B.layer_kinds(base.model))
        """Layer kinds (MoE layer?, sliding window?) in the order predict visits them."""
        self._ops: dict = {}
        self._interned: dict = {}
        self.agg: list[np.ndarray] = []
        """Per interned op list: (3 phases, AGG) sums."""
        self._op_cost: dict = {}
        self.templates: list[Template] = []
        self._tmpl_ids: dict = {}
        self.layouts: dict = {}
        self.layout_list: list[Layout] = []
        out = base.system.tier("scale_out")
        self._shared: dict | None = {} if out.oversubscription <= 1 else None
        self._memo: dict = {}

    # ---- plans and scenarios -------------------------------------------------------------------------------------
    def scenario(self, fields: dict) -> Scenario:
        """The search's scenario of a plan given by its fields (open knobs of the base are dropped: the plan is
        the search's, not one to be chosen). The plans come from the search's table, whose rows passed the spec's
        consistency checks, so they are built without checking them again (a part is priced for thousands of them;
        the plans a search shows are built and checked normally)."""
        plan = replace_unchecked(self.base.plan, fields)
        return replace_unchecked(self.base, {"plan": plan, "open_knobs": (), "chosen": ()})

    # ---- ops -------------------------------------------------------------------------------------------------------
    def _cost(self, op) -> tuple[float, float, bool]:
        c = self._op_cost.get(op)
        if c is None:
            c = (op_time_s(op, self.dev, self.cal), host_time_s(op, self.cal), T.is_attention_core(op))
            self._op_cost[op] = c
        return c

    def intern_ops(self, ops: list) -> int:
        """Id of an op list (with counts) by content; its per-phase sums are `agg[id]`."""
        key = tuple(ops)
        i = self._interned.get(key)
        if i is None:  # summed in Python floats: the same IEEE double additions, in the same order, as in an array
            a = [[0.0] * len(AGG) for _ in PHASES]
            for op, c in ops:
                t1, h1, attn = self._cost(op)
                t = t1 * c
                row = a[PHASES.index(op.phase)]
                row[0] += t
                row[1] += h1 * c
                row[2] += op.host_syncs * c
                if op.kind != "vector":
                    row[3] += t
                if attn:
                    row[4] += t
                row[5] += op.flop * c
            i = self._interned[key] = len(self.agg)
            self.agg.append(np.array(a, dtype=float))
        return i

    def op_time(self, op) -> tuple[float, float]:
        """(GPU time, host time) of one execution of an op."""
        t, h, _ = self._cost(op)
        return t, h

    # ---- per-part values, memoised by the knobs they read ----------------------------------------------------------
    def memo(self, part: str, key: tuple, fields, fn):
        """`fn(scenario)` for the representative plan `fields` (a dict, or a function returning one, called only
        when needed), once per (part, key)."""
        k = (part, key)
        if k not in self._memo:
            self._memo[k] = fn(self.scenario(fields() if callable(fields) else fields))
        return self._memo[k]

    def layer_ops_id(self, key, fields, kind) -> int:
        return self.memo("ops", (key, kind), fields,
                         lambda s: self.intern_ops(B.layer_ops(s, self.kernel, kind[0], kind[1])))

    def embedding_ops_id(self, key, fields, first: bool, last: bool) -> int:
        return self.memo("emb_ops", (key, first, last), fields,
                         lambda s: self.intern_ops(B._embedding_work(s, first, last)[0]))

    def template_id(self, xfers: list) -> int:
        key = tuple(xfers)
        i = self._tmpl_ids.get(key)
        if i is None:
            i = self._tmpl_ids[key] = len(self.templates)
            self.templates.append(Template(xfers))
        return i

    def layer_comm_id(self, key, fields, moe: bool) -> int:
        return self.memo("comm", (key, moe), fields, lambda s: self.template_id(B.layer_comm(s, self.kernel, moe)))

    def layer_zero_id(self, key, fields, moe: bool) -> int:
        return self.memo("zero", (key, moe), fields,
                         lambda s: self.template_id(B.layer_zero_transfers(s.model, s.plan, moe)))

    def embedding_comm_id(self, key, fields, first: bool, last: bool) -> int:
        return self.memo("emb_comm", (key, first, last), fields,
                         lambda s: self.template_id(B._embedding_work(s, first, last)[1]))

    def layout(self, key, fields) -> int:
        """Index (into `layout_list`) of the placement `key` (tp, cp, dp, pp, ep, etp, placement code)."""
        i = self.layouts.get(key)
        if i is None:
            i = self.layouts[key] = len(self.layout_list)
            self.layout_list.append(Layout(self.scenario(fields() if callable(fields) else fields), self.cal,
                                           self._shared))
        return i

    def layer_params(self, key, fields, moe: bool) -> tuple[float, float]:
        """(parameters, routed-expert parameters) of one layer of a kind on one rank."""
        return self.memo("params", (key, moe), fields,
                         lambda s: (T.layer_params(s.model, s.plan, moe_layer=moe),
                                    T.layer_expert_params(s.model, s.plan) if moe else 0.0))

    def embedding_params(self, key, fields, first: bool, last: bool) -> tuple[float, float]:
        """(parameters, routed-expert parameters) a stage adds for the embedding, output layer and MTP modules."""
        return self.memo("emb_params", (key, first, last), fields, lambda s: B.end_params(s, first, last))

    def activations(self, key, fields, kind) -> float:
        """Activation bytes one layer of a kind keeps without full recompute (memory's per-kind value)."""
        def fn(s):
            p = s.plan
            no_rc = dataclasses.replace(s, plan=dataclasses.replace(
                p, recompute="selective" if p.recompute == "selective" else "none", recompute_layers=0))
            return layer_activation_bytes(no_rc, self.kernel, moe_layer=kind[0], window=kind[1])
        return self.memo("acts", (key, kind), fields, fn)

    def layer_input_bytes(self, key, fields) -> float:
        """Bytes a fully recomputed layer keeps (its input)."""
        return self.memo("inputs", key, fields, lambda s: layer_activation_bytes(
            dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="full", recompute_layers=0,
                                                            cuda_graphs=False)),
            self.kernel))

    def saved_bytes(self, key, fields, kind) -> float:
        """Bytes one layer of a kind keeps without any recompute: what offloading moves (build.stage_saved_bytes)."""
        return self.memo("saved", (key, kind), fields,
                         lambda s: B.unrecomputed_layer_bytes(s.model, s.plan, self.kernel, kind[0], kind[1]))

    def embedding_zero_id(self, key, fields, first: bool, last: bool) -> int:
        """ZeRO-3 / ZeRO-2 (with accumulation) traffic of a stage's embedding, output layer and MTP parameters."""
        def fn(s):
            emb = B.end_params(s, first, last)[0]
            if s.plan.comm_zero_stage == 3:
                return self.template_id(B.zero3_transfers(s.plan, emb, 0.0))
            if B.zero2_per_microbatch(s.plan):
                return self.template_id(B.zero2_transfers(s.plan, emb, 0.0))
            return self.template_id([])
        return self.memo("emb_zero", (key, first, last), fields, fn)

    def pp_id(self, key, fields, first: bool, last: bool) -> int:
        """Pipeline traffic of a stage; key (pp, tp, cp, vpp, mbs). Priced by what it reads: pp > 1, vpp, the ends
        and the message size."""
        k = ("pp_msg", key, first, last)
        if k not in self._memo:
            pp, tp, cp, vpp, mbs = key
            stand = _StandInPlan(pp=pp, tp=tp, cp=cp, vpp=vpp, mbs=mbs, precision=self.base.plan.precision,
                                 dualpipev=False)  # the search ranks Megatron's schedules
            msg = B.p2p_bytes(self.base.model, stand)
            k2 = ("pp", (pp > 1, vpp, msg, first, last))
            if k2 not in self._memo:
                self._memo[k2] = self.template_id(B.pp_transfers(stand, first, last, msg))
            self._memo[k] = self._memo[k2]
        return self._memo[k]

    def step_id(self, key, fields, params: float, expert: float) -> int:
        return self.memo("step", (key, params, expert), fields,
                         lambda s: self.template_id(B.step_transfers(s, params, expert)))

    def optimizer_s(self, key, fields, params: float, expert: float) -> float:
        """Time of the optimizer ops of a rank holding `params` (predict: the slower of GPU and host, per op)."""
        def fn(s):
            total = 0.0
            for op, c in B.optimizer_ops(s.plan, params, expert):
                t, h = self.op_time(op)
                total += max(t, h) * c
            return total
        return self.memo("opt", (key, params, expert), fields, fn)

    def mtp_activations(self, key, fields) -> float:
        def fn(s):
            p = s.plan
            no_rc = dataclasses.replace(s, plan=dataclasses.replace(
                p, recompute="selective" if p.recompute == "selective" else "none", recompute_layers=0))
            return s.model.mtp_layers * layer_activation_bytes(no_rc, self.kernel, moe_layer=s.model.moe is not None)
        return self.memo("mtp_acts", key, fields, fn)


class _StandInPlan:
    """The plan fields a pipeline transfer reads (pp, vpp; the message: mbs, cp, tp, precision)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


