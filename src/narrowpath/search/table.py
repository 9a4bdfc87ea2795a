"""The plans of a search space as columns of numbers (one row per plan), built without a Plan object per plan.

A million plans are a few tens of MB of small integers; the pricing (search.bulk) reads the columns directly and
only the plans shown become Plan objects (`PlanTable.plan`). Consistency is decided with the spec's own
`consistency_errors`, called once per distinct combination of the knobs each group of its checks reads (heads,
ffn, sequence, experts and scale-up domain: tp, cp, dp, sp, ep, etp; layers and interleaving: pp, vpp and the
micro-batch count; the Ulysses head split: tp, cp with cp_comm a2a), so the table holds exactly the plans a
Scenario would accept (tests/search hold it against a brute-force enumeration).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from narrowpath.network.placement import group_span
from narrowpath.search.space import SearchSpace, Strategy, activation_strategies, knob_values, recomputed_modules
from narrowpath.spec.plan import CP_COMM, EP_DISPATCH, FP8_PARAMS_ZERO_STAGES, Plan
from narrowpath.spec.scenario import consistency_errors

COLUMNS = ("tp", "pp", "cp", "dp", "sp", "ep", "etp", "mbs", "vpp", "zero", "strat", "plc", "dpo", "bucket", "tpo",
           "cpc", "epo", "disp")
"""Integer columns: the degrees, mbs, vpp, zero stage and flags as themselves; `strat` indexes
`PlanTable.strategies` (recompute, recompute_layers, offload_layers, recompute_modules), `plc` the placements,
`bucket` the bucket sizes, `cpc` spec.plan.CP_COMM and `disp` spec.plan.EP_DISPATCH."""
_INNER = ("mbs", "vpp", "zero", "strat")
_COMM = ("plc", "dpo", "bucket", "tpo", "cpc", "epo", "disp")
_OUTER = ("tp", "pp", "cp", "dp", "sp", "ep", "etp")
_DISP = _COMM.index("disp")


@dataclass(frozen=True, slots=True)
class PlanTable:
    """Every plan of a space in enumeration order, stored in two levels.

    A *structural row* (`cols`: the outer degrees tp, pp, cp, dp, sp, ep, etp and the inner knobs mbs, vpp, zero,
    strat) fixes what a rank computes and holds; the plans of a structural row are its *variants*: the
    communication knobs (`comm`: plc, dpo, bucket, tpo, cpc, epo, disp), one list per block of structural rows with
    the same outer degrees and MoE dispatch (the dispatch's permutations are computed: a block holds one). Memory and compute are the same for every variant of a structural row, so they are
    priced once per structural row. Plan i is variant i − start[s] of structural row s, start = `starts`."""

    space: SearchSpace
    cols: dict[str, np.ndarray]
    """Structural columns (`_OUTER` + `_INNER` + `block`), one entry per structural row."""
    comm: dict[str, np.ndarray]
    """Communication columns (`_COMM` + `block`) of every block's variants, block after block."""
    comm_start: np.ndarray
    """First variant of each block in `comm` (length blocks + 1)."""
    starts: np.ndarray
    """First plan of each structural row (length rows + 1: the last entry is the number of plans)."""
    strategies: tuple[Strategy, ...]
    """Activation strategies (search.space.activation_strategies): a plan built from a row recomputes exactly the
    modules its row was priced with."""
    placements: tuple[tuple[str, ...], ...]
    buckets: tuple[float, ...]
    base_row: int | None
    """Plan index of the base plan, or None when it is not in the space."""

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def num_structural(self) -> int:
        return int(self.cols["tp"].size)

    def variants(self, s: np.ndarray) -> np.ndarray:
        """Number of plans of each structural row in `s`."""
        return self.starts[s + 1] - self.starts[s]

    def locate(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(structural row, index in `comm`) of plans `i`."""
        i = np.asarray(i, dtype=np.int64)
        s = np.searchsorted(self.starts, i, side="right") - 1
        return s, self.comm_start[self.cols["block"][s]] + (i - self.starts[s])

    def expand(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every plan of the structural rows `s`: (plan index, structural row, index in `comm`)."""
        s = np.asarray(s, dtype=np.int64)
        counts = self.variants(s)
        rows = np.repeat(s, counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        k = np.arange(rows.size, dtype=np.int64) - first
        return self.starts[rows] + k, rows, self.comm_start[self.cols["block"][rows]] + k

    def fields(self, i: int) -> dict:
        """Plan fields of plan i (plain Python values)."""
        s, j = self.locate(np.array([i]))
        return self.fields_at(int(s[0]), int(j[0]))

    def fields_at(self, s: int, j: int) -> dict:
        """Plan fields of structural row s with the variant at index j of `comm`, in the types the plan's checks give
        them (`plans_unchecked` builds plans from them without the checks)."""
        c, m = self.cols, self.comm
        rc, rcl, off, mods = self.strategies[int(c["strat"][s])]
        return dict(tp=int(c["tp"][s]), pp=int(c["pp"][s]), cp=int(c["cp"][s]), dp=int(c["dp"][s]),
                    sequence_parallel=bool(c["sp"][s]), ep=int(c["ep"][s]), etp=int(c["etp"][s]),
                    mbs=int(c["mbs"][s]), vpp=int(c["vpp"][s]), zero_stage=int(c["zero"][s]), recompute=rc,
                    recompute_modules=mods,
                    recompute_layers=rcl, offload_layers=off, placement=self.placements[int(m["plc"][j])],
                    dp_overlap=bool(m["dpo"][j]), bucket_bytes=float(self.buckets[int(m["bucket"][j])]),
                    tp_comm_overlap=bool(m["tpo"][j]), cp_comm=CP_COMM[int(m["cpc"][j])],
                    ep_overlap=bool(m["epo"][j]), ep_dispatch=EP_DISPATCH[int(m["disp"][j])],
                    gbs=int(self.space.gbs))

    def plan(self, i: int) -> Plan:
        return dataclasses.replace(self.space.base, **self.fields(i))

    def plans_unchecked(self, idx: np.ndarray) -> list[Plan]:
        """The plans `idx`, built without running the plan's checks again: every row of the table passed them
        (`_Builder.consistent`), so each equals `plan(i)` field for field (tests/search/test_table.py); for the
        many plans of a ranked list the checks were most of the cost."""
        s, j = self.locate(idx)
        return [replace_unchecked(self.space.base, self.fields_at(a, b)) for a, b in zip(s.tolist(), j.tolist())]


class _Codes:
    """Value → code registry (first registered value gets code 0)."""

    def __init__(self, first):
        self.values = [first]

    def code(self, value) -> int:
        if value not in self.values:
            self.values.append(value)
        return self.values.index(value)


def replace_unchecked(proto, changes: dict):
    """`dataclasses.replace(proto, **changes)` without running the frozen dataclass's checks."""
    cls = type(proto)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    new = object.__new__(cls)
    put = object.__setattr__
    for f in names:
        put(new, f, changes[f] if f in changes else getattr(proto, f))
    return new


_FIELDS: dict[type, tuple[str, ...]] = {}


def _default_zero(zero: int, shards: int, arch: str, fp8_params: bool = False) -> bool:
    """Whether an unpinned search tries ZeRO stage `zero`: 0 exactly where there is nothing to shard over (`shards`,
    the larger of the dp·cp group and, for MoE, the expert data-parallel group tp·cp·dp / (ep·etp); always for an
    LSTM), else 1, 2 and 3. FP8 primary weights need the distributed optimizer or FSDP (spec.plan): 1 (also over a
    single rank) and 3."""
    if fp8_params:
        return zero == 1 if shards == 1 else zero in FP8_PARAMS_ZERO_STAGES
    if shards == 1 or arch == "lstm":
        return zero == 0
    return zero in (1, 2, 3)


class _Builder:
    def __init__(self, space: SearchSpace):
        self.space = space
        self.m, self.n, self.gbs, self.b = space.model, space.num_gpus, space.gbs, space.base
        self.v = knob_values(space)
        self.pins = space.pinned
        self.moe = self.m.moe is not None
        self.lstm = self.m.arch == "lstm"
        self.strategies = _Codes(_strategy_of(self.b))
        self.placements = _Codes(self.b.placement)
        self.buckets = _Codes(self.b.bucket_bytes)
        self._ok: dict[tuple, bool] = {}
        self._strats: dict[tuple, tuple[int, ...]] = {}
        self._ep_domains: dict[tuple, int] = {}

    def keep(self, knob: str):
        """The value of a knob that cannot change a plan's numbers: the pinned one, else the base plan's."""
        return self.pins.get(knob, getattr(self.b, knob))

    def consistent(self, kind: str, **kw) -> bool:
        key = (kind, *sorted(kw.items()))
        z0 = 1 if self.b.fp8_params else 0  # a stand-in stage FP8 primary weights accept (spec.plan)
        if key not in self._ok:
            if kind == "stage":  # tp, cp, dp, sp, ep, etp: one pipeline stage's ranks
                plan = dataclasses.replace(self.b, pp=1, vpp=1, mbs=1, gbs=kw["dp"], zero_stage=z0, recompute="none",
                                           recompute_layers=0, offload_layers=0, cp_comm="p2p", **kw)
                gpus = plan.tp * plan.cp * plan.dp
            elif kind == "pipeline":  # pp, vpp, micro-batches
                plan = dataclasses.replace(self.b, tp=1, cp=1, dp=1, ep=1, etp=0, mbs=1, sequence_parallel=False,
                                           zero_stage=z0, recompute="none", recompute_layers=0, offload_layers=0,
                                           cp_comm="p2p", pp=kw["pp"], vpp=kw["vpp"], gbs=kw["micro"])
                gpus = plan.pp
            else:  # "a2a": tp, cp with the Ulysses exchange
                plan = dataclasses.replace(self.b, pp=1, vpp=1, dp=1, ep=1, etp=0, mbs=1, gbs=1,
                                           sequence_parallel=False, zero_stage=z0, recompute="none",
                                           recompute_layers=0, offload_layers=0, cp_comm="a2a", **kw)
                gpus = plan.tp * plan.cp
            self._ok[key] = not consistency_errors(self.m, plan, gpus, self.space.system)
        return self._ok[key]

    def strategy_codes(self, pp: int, vpp: int) -> tuple[int, ...]:
        key = (pp, vpp)
        if key not in self._strats:
            per_chunk = max(1, -(-self.m.layers // (pp * vpp)))
            self._strats[key] = tuple(self.strategies.code(s) for s in activation_strategies(self.space, per_chunk, pp))
        return self._strats[key]

    def shards(self, tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
        """Ranks a ZeRO stage shards something over: the dp·cp group of the dense parameters or, for MoE, the expert
        data-parallel group tp·cp·dp / (ep·etp) of the routed experts' (workload.build.zero_shards), the larger."""
        return max(dp * cp, tp * cp * dp // (ep * (etp or tp))) if self.moe else dp * cp

    def inner(self, tp: int, pp: int, cp: int, dp: int, shards: int) -> list[tuple[int, int, int, int]]:
        v, pins, rows = self.v, self.pins, []
        for mbs in v["mbs"]:
            if self.gbs % (dp * mbs):
                continue
            micro = self.gbs // (dp * mbs)
            for vpp in v["vpp"]:
                if vpp > 1 and (pp == 1 or micro % pp):
                    continue
                if vpp > 1 and not self.space.full and self.m.layers % (pp * vpp):
                    continue
                if not self.consistent("pipeline", pp=pp, vpp=vpp, micro=micro):
                    continue
                strats = self.strategy_codes(pp, vpp)
                for zero in v["zero_stage"]:
                    if "zero_stage" not in pins and not _default_zero(zero, shards, self.m.arch, self.b.fp8_params):
                        continue
                    if self.b.fp8_params and zero not in FP8_PARAMS_ZERO_STAGES:
                        continue  # a pinned stage FP8 primary weights cannot run with (spec.plan)
                    rows += [(mbs, vpp, zero, s) for s in strats]
        return rows

    def ep_domains(self, tp, pp, cp, dp, ep, etp, placement) -> int:
        key = (tp, pp, cp, dp, ep, etp, placement)
        if key not in self._ep_domains:
            plan = dataclasses.replace(self.b, tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, placement=placement,
                                       vpp=1, mbs=1, gbs=dp, sequence_parallel=False, recompute="none",
                                       recompute_layers=0, offload_layers=0)
            self._ep_domains[key] = group_span(plan, self.space.system, "ep").domains
        return self._ep_domains[key]

    def comm(self, tp: int, pp: int, cp: int, dp: int, ep: int, etp: int) -> list[tuple[int, ...]]:
        v, pins = self.v, self.pins
        sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
        plcs, seen = [], set()
        for plc in v["placement"]:
            eff = tuple(a for a in plc if a != "ep" and sizes[a] > 1)
            if eff not in seen or "placement" in pins:
                seen.add(eff)
                plcs.append(plc)
        expert_tp = etp or tp
        sync = dp * cp > 1 or (self.moe and tp * cp * dp // (expert_tp * ep) > 1)
        dpos = v["dp_overlap"] if sync else (self.keep("dp_overlap"),)
        tpos = v["tp_comm_overlap"] if tp > 1 else (self.keep("tp_comm_overlap"),)
        cpcs = tuple(c for c in v["cp_comm"] if c != "a2a" or self.consistent("a2a", tp=tp, cp=cp)) if cp > 1 \
            else (self.keep("cp_comm"),)
        epos = v["ep_overlap"] if self.moe and (ep > 1 or expert_tp > 1) else (self.keep("ep_overlap"),)
        out = []
        for plc in plcs:
            pc = self.placements.code(plc)
            if not (self.moe and ep > 1):
                disps = (self.keep("ep_dispatch"),)
            elif "ep_dispatch" in pins or len(v["ep_dispatch"]) < 2 \
                    or self.ep_domains(tp, pp, cp, dp, ep, etp, plc) > 1 or self.m.moe.num_experts <= ep:
                disps = v["ep_dispatch"]
            else:  # inside one domain, more than one expert a rank: a deduplicating dispatch sends a token once to
                # each rank holding any of its experts (workload.moe.ranks_per_token ≤ top_k copies) and permutes
                # what it received, no more than the all-to-all dispatcher's permute and chunk sorts
                # (workload.moe.permute_traffic): the all-to-all plan is never faster. With one expert a rank the
                # all-to-all dispatcher sorts nothing and permutes fewer rows than the received ones: both are tried
                disps = ("dedup",)
            for dpo in dpos:
                bks = v["bucket_bytes"] if dpo and sync else (self.keep("bucket_bytes"),)
                for bk in bks:
                    bc = self.buckets.code(bk)
                    for tpo in tpos:
                        for cpc in cpcs:
                            for epo in epos:
                                for d in disps:
                                    out.append((pc, int(dpo), bc, int(tpo), CP_COMM.index(cpc), int(epo),
                                                EP_DISPATCH.index(d)))
        return out

    def build(self) -> PlanTable:
        v, pins, n = self.v, self.pins, self.n
        blocks = []
        for tp in v["tp"]:
            if n % tp:
                continue
            for pp in v["pp"]:
                if (n // tp) % pp:
                    continue
                for cp in v["cp"]:
                    if (n // (tp * pp)) % cp:
                        continue
                    dp = n // (tp * pp * cp)
                    if "dp" in pins and dp != pins["dp"]:
                        continue
                    inners: dict[bool, list] = {}  # by whether there is something to shard
                    for sp in v["sequence_parallel"]:
                        if sp and tp == 1 or ("sequence_parallel" not in pins and not self.lstm and sp != (tp > 1)):
                            continue
                        for ep in v["ep"]:
                            if not self.space.full and ep > 1 and dp % ep:
                                continue
                            for etp in v["etp"]:
                                if self.space.full and self.moe and "etp" not in pins and etp == tp:
                                    continue  # etp = tp is etp 0
                                if not self.consistent("stage", tp=tp, cp=cp, dp=dp, sequence_parallel=sp, ep=ep,
                                                       etp=etp):
                                    continue
                                shards = self.shards(tp, cp, dp, ep, etp)
                                if (shards > 1) not in inners:
                                    inners[shards > 1] = self.inner(tp, pp, cp, dp, shards)
                                inner = inners[shards > 1]
                                comm = self.comm(tp, pp, cp, dp, ep, etp) if inner else []
                                # one block per MoE dispatch: it changes what a rank computes (its permutations:
                                # workload.moe.permute_traffic), which a structural row prices once for its variants
                                for d in sorted({v[_DISP] for v in comm}):
                                    blocks.append(((tp, pp, cp, dp, int(sp), ep, etp), inner,
                                                   [v for v in comm if v[_DISP] == d]))
        base_row = self._base_row(blocks)
        cols, comm, comm_start, starts = _assemble(blocks)
        return PlanTable(self.space, cols, comm, comm_start, starts, tuple(self.strategies.values),
                         tuple(self.placements.values), tuple(self.buckets.values), base_row)

    def _base_codes(self) -> dict[str, int]:
        b = self.b
        # the enumeration writes etp = tp as etp 0 (the same plan: Plan.expert_tp); so is the base plan looked up
        etp = 0 if self.space.full and self.moe and "etp" not in self.pins and b.etp == b.tp else b.etp
        return dict(tp=b.tp, pp=b.pp, cp=b.cp, dp=b.dp, sp=int(b.sequence_parallel), ep=b.ep, etp=etp, mbs=b.mbs,
                    vpp=b.vpp, zero=b.zero_stage, strat=self.strategies.code(_strategy_of(b)),
                    plc=self.placements.code(b.placement), dpo=int(b.dp_overlap),
                    bucket=self.buckets.code(b.bucket_bytes), tpo=int(b.tp_comm_overlap),
                    cpc=CP_COMM.index(b.cp_comm), epo=int(b.ep_overlap), disp=EP_DISPATCH.index(b.ep_dispatch))

    def _base_row(self, blocks: list) -> int | None:
        """Plan index of the base plan; a block of its own is appended when the enumeration did not reach it."""
        b, space = self.b, self.space
        if b.gbs != space.gbs or b.num_gpus != space.num_gpus:
            return None
        codes = self._base_codes()
        outer = tuple(codes[k] for k in _OUTER)
        inner = tuple(codes[k] for k in _INNER)
        comm = tuple(codes[k] for k in _COMM)
        start = 0
        for o, inn, com in blocks:
            if o == outer and inner in inn and comm in com:
                return start + inn.index(inner) * len(com) + com.index(comm)
            start += len(inn) * len(com)
        if not all(getattr(b, k) == val for k, val in self.pins.items()) \
                or consistency_errors(self.m, b, space.num_gpus, space.system):
            return None
        blocks.append((outer, [inner], [comm]))
        return start


def _strategy_of(plan: Plan) -> Strategy:
    return (plan.recompute, plan.recompute_layers, plan.offload_layers,
            plan.recompute_modules if plan.recompute == "selective" else ())


def twin_strategies(strategies, activation_cache: str = "default") -> list[int]:
    """Per strategy, the lighter one a plan of it may price exactly as (else −1): for selective recompute, among the
    strategies with the same recomputed and offloaded layers that recompute a proper subset of its modules, or the
    same set with recompute none or fewer modules named (`search.space.recomputed_modules`: recompute none's set is
    empty but under DeepSeek-V3's FP8 cache, where it is the MoE activation, which that cache also adds to any
    selective set), the one with the largest set (the first listed among equals). Chained, every selective strategy
    reaches none through ever smaller sets, so plans that price the same count once, as the one that recomputes
    least (search.rank.drop_equivalent)."""
    sets = [recomputed_modules(s, activation_cache) if s[0] in ("none", "selective") else None for s in strategies]
    out = []
    for s, mods in zip(strategies, sets):
        best = -1
        if s[0] == "selective":
            for j, (o, other) in enumerate(zip(strategies, sets)):
                lighter = other is not None and (other < mods or (other == mods and _named(o) < _named(s)))
                if lighter and o[1:3] == s[1:3] and (best < 0 or len(other) > len(sets[best])):
                    best = j
        out.append(best)
    return out


def _named(s) -> tuple[int, int]:
    """How much a strategy of a given recomputed set names: recompute none before selective, then fewer modules."""
    return (s[0] != "none", len(s[3]))


_DTYPE = {"dp": np.int32, "ep": np.int32, "etp": np.int32, "tp": np.int32, "pp": np.int32, "cp": np.int32,
          "mbs": np.int32, "strat": np.int16, "block": np.int32}


def _assemble(blocks):
    """(structural columns, communication columns, first variant of each block, first plan of each row)."""
    cols: dict[str, list] = {k: [] for k in _OUTER + _INNER + ("block",)}
    comm: dict[str, list] = {k: [] for k in _COMM + ("block",)}
    comm_start, nvar = [0], []
    for bi, (outer, inner, com) in enumerate(blocks):
        a, c = np.array(inner, dtype=np.int64).reshape(-1, len(_INNER)), np.array(com, dtype=np.int64)
        for j, k in enumerate(_INNER):
            cols[k].append(a[:, j])
        for j, k in enumerate(_OUTER):
            cols[k].append(np.full(len(a), outer[j]))
        cols["block"].append(np.full(len(a), bi))
        for j, k in enumerate(_COMM):
            comm[k].append(c[:, j])
        comm["block"].append(np.full(len(c), bi))
        comm_start.append(comm_start[-1] + len(c))
        nvar.append(np.full(len(a), len(c)))

    def cat(parts: dict) -> dict[str, np.ndarray]:
        return {k: (np.concatenate(v) if v else np.zeros(0)).astype(_DTYPE.get(k, np.int8)) for k, v in parts.items()}

    counts = np.concatenate(nvar) if nvar else np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    return cat(cols), cat(comm), np.array(comm_start, dtype=np.int64), starts


def build_table(space: SearchSpace) -> PlanTable:
    """The plans of `space` as a table (see module docstring)."""
    return _Builder(space).build()
