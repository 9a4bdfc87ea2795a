"""Time of one collective on the tiers its group spans — the single entry point `collective_time`.

Model: NCCL's own tuning model (NVIDIA/nccl `src/graph/tuning.cc`, `ncclTopoTuneModel`/`ncclTopoGetAlgoTime`):
for each algorithm a and protocol p,  t(a, p) = base_lat(a, p) + Σ_steps hop_lat(tier, p) + S / algbw(a, p),
and `auto` takes the fastest (a, p), as NCCL does. Latency per step and per tier comes from the calibration
(`alpha_s`, the Simple-protocol hop); LL and LL128 hops are the NCCL ratios to it. The α-β form with several
protocols gives the message-size ramp (small messages latency-bound, LL; large ones bandwidth-bound, Simple)
and is monotone in size (a minimum of increasing functions). Simple-protocol bandwidth is scaled by NCCL's measured
mid-size correction (`simple_ramp`), so busbw climbs through the MBs as in nccl-tests instead of jumping to the
plateau.

Conventions of nccl-tests (doc/PERFORMANCE.md): algbw = S / t; busbw = algbw · 2(n−1)/n for all_reduce,
· (n−1)/n for all_gather, reduce_scatter and all_to_all, · 1 for broadcast and send/recv. `message_bytes` is the
nccl-tests "size": the whole buffer (all_reduce), the gathered output (all_gather), the input (reduce_scatter),
the data each rank sends in total (all_to_all), the payload (send_recv, broadcast).

Legend: S message bytes, n group size, d scale-up domains spanned, r members per domain, B bus bandwidth (bytes/s)
the algorithm can sustain, α hop latency (s).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from narrowpath.errors import SpecError
from narrowpath.network.paths import PathModel, path_model
from narrowpath.network.placement import GroupSpan
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.system import System

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")

# NCCL software constants (NVIDIA/nccl src/graph/tuning.cc, NCCL 2.1x): base latency per (algorithm, protocol)
# in seconds, hop latency of LL/LL128 relative to Simple (hwLat NVLink ring .47/1.9/3.4 us, net 2.7/4.0/9.6 us),
# and the protocol's bandwidth factor (LL: 8-byte lines with a 4-byte flag and ring LL busBw /4 for all-reduce;
# LL128: 120 of 128 bytes, 0.92).
PROTOCOLS = ("LL", "LL128", "Simple")
_BASE_LAT_S = {"ring": (6.6e-6, 14.0e-6, 8.4e-6), "tree": (6.8e-6, 14.0e-6, 8.4e-6)}
_HOP_RATIO = {"scale_up": (0.47 / 3.4, 1.9 / 3.4, 1.0), "scale_out": (2.7 / 9.6, 4.0 / 9.6, 1.0)}
_LL_BW = {"all_reduce": 1 / 4, "other": 1 / 3}
_LL128_BW = 0.92
_TREE_BW = 0.9
"""Double binary tree bus bandwidth relative to the ring's (tuning.cc: `busBw*.9`)."""
P2P_LL_THRESHOLD_BYTES = 16384 * 2
"""Largest send/recv NCCL runs in the LL protocol: `P2P_LL_THRESHOLD` (16 KiB) a channel times the channels a peer
gets (enqueue.cc: nChannels·P2P_LL_THRESHOLD; 2 = NCCL_NCHANNELS_PER_NET_PEER's default, the net peers' count)."""
_P2P_PARALLEL = 8
"""Peer exchanges of a grouped all-to-all that NCCL overlaps over its channels (ncclP2pSchedule rounds)."""
_SIMPLE_RAMP = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9)
"""Simple-protocol bandwidth factor at 64·2^i bytes, i = 0..23 (NVIDIA/nccl src/graph/tuning.cc
`treeCorrectionFactor[NCCL_PROTO_SIMPLE]`, 2.19-2.2x; 1.0 from 1 GiB on, where NCCL stops correcting)."""
_RAMP_LOG2_MIN, _RAMP_LOG2_END = 6.0, 6.0 + len(_SIMPLE_RAMP)


def simple_ramp(message_bytes: float) -> float:
    """Fraction of the Simple protocol's bus bandwidth reached at `message_bytes`.

    NCCL's tuner derates its tree by this measured table because "trees are not perfectly sticking to the model
    for medium sizes" (tuning.cc). Rings and NVLS show the same mid-size shortfall in nccl-tests (a 4 MB chunk
    pipeline of 8 steps over up to 32 channels is under-filled below ~100 MB; see docs/network.md for the
    comparison with a published 8-GPU sweep), so every Simple-protocol bandwidth term uses it. Interpolated
    linearly in log2(size) so that time stays monotone (the factor never grows faster than size); NCCL's own
    step-wise lookup would not be.
    """
    if message_bytes <= 64.0:
        return _SIMPLE_RAMP[0]
    x = math.log2(message_bytes)
    if x >= _RAMP_LOG2_END:
        return 1.0
    i = int(x - _RAMP_LOG2_MIN)
    f = x - _RAMP_LOG2_MIN - i
    hi = _SIMPLE_RAMP[i + 1] if i + 1 < len(_SIMPLE_RAMP) else 1.0
    return _SIMPLE_RAMP[i] + f * (hi - _SIMPLE_RAMP[i])


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """Result of costing one collective."""

    time_s: float
    algorithm: str
    """Algorithm used (`ring`, `tree`, `hierarchical`, `nvls`, `sharp`, `direct`, `p2p`; `one_shot`: a serving engine's
    peer-to-peer all-reduce kernel, `p2p_all_reduce_time`); with `auto`, the fastest."""
    busbw_bytes_per_s: float
    """Bus bandwidth in the nccl-tests convention for this op and size."""
    bottleneck_tier: str
    """Tier whose bandwidth bounds the transfer (`scale_up`, `scale_out`, or `none` for one rank)."""
    wire_bytes_per_rank: float
    """Bytes each rank sends over the network for this collective."""
    protocol: str = ""
    """NCCL protocol the time assumes (`LL`, `LL128`, `Simple`)."""
    latency_s: float = 0.0
    """Size-independent part of `time_s` (launch + per-step latencies)."""


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw factor over size/time (nccl-tests doc/PERFORMANCE.md, and each test's *GetBw in src/):
    2(n−1)/n for all_reduce; (n−1)/n for all_gather, reduce_scatter, all_to_all, gather and scatter (GatherGetBw,
    ScatterGetBw: busBw = algBw·(n−1)/n) and hypercube (its algBw is already (n−1)/n of size/time, busBw = algBw);
    1 for broadcast, reduce and send/recv."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "hypercube"):
        return (n - 1) / n
    return 1.0


def ring_steps(op: str, n: int) -> int:
    """Sequential α-steps of a ring: 2(n−1) for all_reduce, n−1 for the others, 1 for point-to-point."""
    if op == "all_reduce":
        return 2 * (n - 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        return n - 1
    return 1


def ring_wire_bytes(op: str, message_bytes: float, n: int) -> float:
    """Bytes one rank sends in a ring: 2(n−1)S/n for all_reduce (→ 2S as n grows), (n−1)S/n for AG/RS
    (Patarasuk & Yuan 2009, bandwidth-optimal all-reduce; Thakur et al. 2005, §4)."""
    return message_bytes * bus_factor(op, n)


def _best(t_lat: tuple[float, ...], algbw: tuple[float, ...], message_bytes: float) -> tuple[float, int]:
    """Fastest protocol: (time, index) of min over p of lat_p + S / algbw_p (ncclTopoGetAlgoTime)."""
    best_t, best_p = math.inf, 2
    ramp = simple_ramp(message_bytes)
    for p in range(3):
        if algbw[p] > 0:
            t = t_lat[p] + message_bytes / (algbw[p] * ramp if p == 2 else algbw[p])
            if t < best_t:
                best_t, best_p = t, p
    return best_t, best_p


def _ring_lat(op: str, pm: PathModel, n: int, algo: str = "ring") -> tuple[float, ...]:
    """Latency of a ring per protocol: NCCL counts inter-node steps at the network hop, the rest at NVLink."""
    steps = ring_steps(op, n)
    inter = ring_steps(op, pm.domains) if pm.domains > 1 else 0
    return tuple(_BASE_LAT_S[algo][p] + (steps - inter) * pm.alpha_up_s * _HOP_RATIO["scale_up"][p]
                 + inter * pm.alpha_out_s * _HOP_RATIO["scale_out"][p] for p in range(3))


def _protocol_bw(op: str, bus_bw: float, factor: float, multinode: bool, ll128: bool = True
                 ) -> tuple[float, float, float]:
    """Algorithm bandwidth per protocol from the Simple bus bandwidth (tuning.cc model refinements); LL128 only
    where NCCL enables it, an NVLink path (0: not offered)."""
    ll = _LL_BW["all_reduce" if (op == "all_reduce" or multinode) else "other"]
    alg = bus_bw / factor
    return (alg * ll, alg * _LL128_BW if ll128 else 0.0, alg)


def _cost(op, algo, S, t_lat, algbw, tier, wire, n) -> CollectiveCost:
    t, p = _best(t_lat, algbw, S)
    busbw = S * bus_factor(op, n) / t if op not in ("broadcast", "send_recv") else S / t
    return CollectiveCost(t, algo, busbw, tier, wire, PROTOCOLS[p], t_lat[p])


# ---- algorithms: (op, S, path model of the (sub-)group) -> CollectiveCost | None (None = not applicable) ----

def ring(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """Ring (Patarasuk & Yuan 2009): per-rank traffic (n−1)/n·S (×2 for all_reduce) at the ring bus bandwidth.
    Across domains NCCL lays one ring per NIC rail, so the ring's inter-domain bus bandwidth is r × NIC rate.
    When the calibration carries a measured busbw-by-size table for the bounding tier, that table is the ramp."""
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        return None
    n = pm.size
    factor = bus_factor(op, n) if op != "broadcast" else 1.0
    steps_lat = _ring_lat(op if op != "broadcast" else "all_gather", pm, n)  # broadcast: one pass, n−1 hops
    measured = pm.measured_busbw(S) if op in ("all_reduce", "all_gather", "reduce_scatter") else 0.0
    if measured > 0:  # the calibration measured this tier's ring busbw by size: it already holds the ramp
        extra = _extra_steps_s(op, pm, n)
        s0 = pm.measured_min_bytes
        if S < s0:  # below the smallest measured size the time is the latency floor measured there, not ∝ S
            t = s0 * factor / pm.measured_busbw(s0) + extra
            return CollectiveCost(t, "ring", S * factor / t, pm.ring_tier, S * factor, "measured", t)
        floor = S * factor / (pm.up_line_bw if pm.tier == "scale_up" else pm.ranks_per_domain * pm.nic_line_bw)
        t = max(S * factor / measured + extra, floor)
        return CollectiveCost(t, "ring", S * factor / t, pm.ring_tier, S * factor, "measured", extra)
    algbw = _protocol_bw(op, pm.ring_busbw, factor, pm.domains > 1, pm.ll128)
    return _cost(op, "ring", S, steps_lat, algbw, pm.ring_tier, S * factor, n)


def _extra_steps_s(op: str, pm: PathModel, n: int) -> float:
    """Latency of the ring steps a group of n ranks takes beyond the group its measured busbw table came from: the
    table holds the measured group's own 2(n0 − 1) or n0 − 1 steps, and NCCL's ring pays one hop per step
    (tuning.cc: baseLat + nsteps·hwLat), so a 1,024-rank ring is not the 2-rank time scaled by its bus factor.
    Simple-protocol hop of the spanned tier; 0 when the size was not recorded or the group is not larger: how much
    of a measured time is latency the table does not say, so a smaller group keeps the measured group's latency
    (subtracting the steps it does not take priced an 8-byte TP 2 all-reduce from an 8-rank table at 0 s)."""
    n0 = pm.measured_ranks
    if n0 < 2 or n <= n0:
        return 0.0
    return (ring_steps(op, n) - ring_steps(op, n0)) * pm.alpha_s


def tree(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """Double binary tree all-reduce (Sanders, Speck & Träff 2009; NCCL 2.4): intra-node chain plus a
    log2(d)-deep tree between domains; latency 2((r−1)α_up + log2(d)α_out), algbw = 0.9·B/2 (tuning.cc) — r the
    busiest domain's members, whose chain the tree waits for (9 ranks on 8-GPU nodes chain 8, not the lone one's 1:
    until the fifty-sixth session the fewest were taken and 9 GPUs all-reduced 8 bytes faster than 8)."""
    if op != "all_reduce" or pm.domains < 2:
        return None
    r, d = pm.busiest_domain or pm.ranks_per_domain, pm.domains
    lat = tuple(_BASE_LAT_S["tree"][p] + 2 * ((r - 1) * pm.alpha_up_s * _HOP_RATIO["scale_up"][p]
                                            + math.ceil(math.log2(d)) * pm.alpha_out_s * _HOP_RATIO["scale_out"][p])
                for p in range(3))
    bw = _TREE_BW * pm.ring_busbw / 2.0
    algbw = (bw / 3.8, bw * 0.915 if pm.ll128 else 0.0, bw)
    return _cost(op, "tree", S, lat, algbw, pm.ring_tier, 2.0 * S, pm.size)


def hierarchical(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """Intra-domain reduce-scatter → inter-domain all-reduce of S/r on r rails in parallel → intra-domain
    all-gather (Thakur et al. 2005 §4 composed per tier; NCCL's 'tree/collnet chain' structure). Equal to the
    flat ring when the group fits one domain."""
    if op != "all_reduce":
        return None
    r, d = pm.ranks_per_domain, pm.domains
    up = pm.restricted(domains=1)  # the busiest domain's ring: the step waits for it
    rs = ring("reduce_scatter", S, up) if up.size > 1 else None
    ag = ring("all_gather", S, up) if up.size > 1 else None
    t_up, lat = 0.0, 0.0
    for part in (rs, ag):
        if part is not None:
            t_up, lat = t_up + part.time_s, lat + part.latency_s
    t_out = 0.0
    if d > 1:
        out = ring("all_reduce", S / r, pm.restricted(ranks_per_domain=1))
        t_out, lat = out.time_s, lat + out.latency_s
    if r > 1 and d == 1:  # one domain: exactly the flat ring's steps and bytes
        return ring(op, S, pm)
    t = t_up + t_out
    return CollectiveCost(t, "hierarchical", S * bus_factor(op, pm.size) / t,
                          "scale_out" if t_out >= t_up else "scale_up", S * bus_factor(op, pm.size), "Simple", lat)


def nvls(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """NVLink SHARP all-reduce inside one domain: the switch reduces (multimem.ld_reduce) and multicasts, so each
    GPU moves ~S each way instead of 2(n−1)S/n. Its real gain is derated: the attained algbw is the calibrated
    NVLS busbw of a full domain over that domain's 2(D−1)/D (~274 GB/s on 8 H100 → 480 GB/s busbw, nccl-tests
    #212, nccl #1455), capped by the GPU's effective link rate (so 2-4 GPUs ≈ ring, as measured in nccl #1455)."""
    if op != "all_reduce" or pm.nvls_algbw <= 0 or pm.domains > 1:
        return None
    lat = pm.nvls_latency_s
    algbw = min(pm.nvls_algbw, pm.up_bw) * simple_ramp(S)
    t = lat + S / algbw
    return CollectiveCost(t, "nvls", S * bus_factor(op, pm.size) / t, "scale_up", S, "Simple", lat)


def sharp(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """In-network reduction on the scale-out fabric (InfiniBand SHARP / NCCL CollNet): intra-domain
    reduce-scatter, each rail sends S/r up once and receives the reduced S/r once (no 2(d−1)/d), intra all-gather.
    Latency: one switch round trip on the network instead of log2(d) or 2(d−1) steps (tuning.cc CollNet)."""
    if op != "all_reduce" or not pm.out_in_network or pm.domains < 2:
        return None
    r = pm.ranks_per_domain
    up = pm.restricted(domains=1)
    t = lat = 2 * pm.alpha_out_s + _BASE_LAT_S["ring"][2]
    if up.size > 1:
        for part in (ring("reduce_scatter", S, up), ring("all_gather", S, up)):
            t, lat = t + part.time_s, lat + part.latency_s
    t += (S / r) / (_TREE_BW * pm.nic_bw * simple_ramp(S / r))
    return CollectiveCost(t, "sharp", S * bus_factor(op, pm.size) / t, "scale_out", S, "Simple", lat)


def direct(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """Direct all-to-all (grouped send/recv to every peer): S(r−1)/n over NVLink and S(n−r)/n over the rank's NIC
    at the same time; the slower leg bounds it (alone on the fabric: contention with other groups across an
    oversubscribed spine is `network.contention.concurrent_slowdown`). Latency: ⌈(n−1)/8⌉ peer rounds
    (ncclP2pSchedule)."""
    if op != "all_to_all":
        return None
    n, r = pm.size, pm.ranks_per_domain
    rounds = math.ceil((n - 1) / _P2P_PARALLEL)
    alpha = pm.alpha_out_s if pm.domains > 1 else pm.alpha_up_s
    lat = _BASE_LAT_S["ring"][2] + rounds * alpha
    t_up = S * (r - 1) / n / pm.up_bw if r > 1 else 0.0
    t_out = S * (n - r) / n / pm.nic_bw if pm.domains > 1 else 0.0
    tier = "scale_out" if t_out >= t_up else "scale_up"
    t = lat + max(t_up, t_out)
    return CollectiveCost(t, "direct", S * bus_factor(op, n) / t, tier, S * (n - 1) / n, "Simple", lat)


def p2p(op: str, S: float, pm: PathModel) -> CollectiveCost | None:
    """Point-to-point send/recv between neighbours: α + S/B over the scale-up tier when both sit in one domain
    (the pair's own link on a full mesh), else over the sender's NIC (Hockney α-β). NCCL runs a send/recv in
    LL up to `P2P_LL_THRESHOLD_BYTES` and in Simple above, never LL128 (src/enqueue.cc `addP2pToPlan`:
    `protoLL ? NCCL_PROTO_LL : NCCL_PROTO_SIMPLE`), and prices it with no tuner model, so no collective's
    mid-size ramp: LL's latency and its share of the rate below the threshold, Simple's at full rate above (a
    pipeline send of 16.8 MB over an H100's NIC: 366 µs, where LL128 read 408)."""
    if op != "send_recv":
        return None
    bw, alpha, tier = (pm.pair_bw or pm.up_bw, pm.alpha_up_s, "scale_up") if pm.domains <= 1 else \
        (pm.nic_bw, pm.alpha_out_s, "scale_out")
    p = 0 if S <= P2P_LL_THRESHOLD_BYTES else 2
    lat = _BASE_LAT_S["ring"][p] + alpha * _HOP_RATIO[tier][p]
    t = lat + S / (bw * (_LL_BW["all_reduce" if pm.domains > 1 else "other"] if p == 0 else 1.0))
    return CollectiveCost(t, "p2p", S / t, tier, S, PROTOCOLS[p], lat)


AlgorithmFn = Callable[[str, float, PathModel], "CollectiveCost | None"]
REGISTRY: dict[str, AlgorithmFn] = {
    "ring": ring, "tree": tree, "hierarchical": hierarchical, "nvls": nvls, "sharp": sharp,
    "direct": direct, "p2p": p2p,
}
"""Collective algorithms by name (STYLE.md #8); each returns None where it does not apply."""
ALGORITHMS = ("auto", *REGISTRY)
ONLY_ALGORITHM = {"all_to_all": "direct", "send_recv": "p2p"}
"""Ops NCCL runs with one algorithm only: `auto` means it; naming another is an error (it printed a "ring" table
of p2p rows)."""


def collective_time(op: str, message_bytes: float, span: GroupSpan, system: System, calibration: Calibration,
                    algorithm: str = "auto") -> CollectiveCost:
    """Seconds for one collective of `message_bytes` on the group `span` (see module docstring).

    `algorithm="auto"` returns the fastest applicable algorithm and protocol, as NCCL's tuner does; a named one
    that does not apply to this op or group raises SpecError.
    """
    if op not in OPS:
        raise SpecError("collective.op", f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise SpecError("collective.algorithm", f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if not math.isfinite(message_bytes) or message_bytes < 0:
        raise SpecError("collective.message_bytes", f"must be a finite number >= 0, got {message_bytes}")
    if op in ONLY_ALGORITHM and algorithm not in ("auto", ONLY_ALGORITHM[op]):
        only = ONLY_ALGORITHM[op]
        raise SpecError("collective.algorithm", f"{algorithm} does not apply to {op}: NCCL runs it as {only} only "
                        f"(give auto or {only})")
    if span.size <= 1 or message_bytes == 0:
        return CollectiveCost(0.0, "none", 0.0, "none", 0.0)
    if span.others:  # groups of several shapes run at once: the step waits for the slowest (GroupSpan.others)
        return max((collective_time(op, message_bytes, s, system, calibration, algorithm)
                    for s in (replace(span, others=()),) + span.others), key=lambda c: c.time_s)
    pm = path_model(span, system, calibration)
    if op in ONLY_ALGORITHM:
        algorithm = ONLY_ALGORITHM[op]
    names = REGISTRY if algorithm == "auto" else (algorithm,)
    best = None
    for name in names:
        c = REGISTRY[name](op, float(message_bytes), pm)
        if c is not None and (best is None or c.time_s < best.time_s):
            best = c
    if best is None:
        raise SpecError("collective.algorithm", f"{algorithm} does not apply to {op} on this group (system "
                        f"{system.name}: {pm.size} ranks over {pm.domains} scale-up domain(s))")
    return best


def one_shot_all_reduce(S: float, pm: PathModel) -> CollectiveCost | None:
    """A serving engine's one-shot all-reduce inside one scale-up domain: every rank writes its S bytes to a buffer
    each peer can address, waits on one flag barrier, and reduces the n copies itself — one step of latency
    (α, the scale-up hop) and (n − 1)·S bytes into each rank's port at the Simple protocol's mid-size ramp, where
    NCCL's ring takes 2(n − 1) steps (vLLM `cross_device_reduce_1stage`, csrc/custom_all_reduce.cuh, PR #2192;
    TensorRT-LLM's ONESHOT custom all-reduce; SGLang's port of it). On a full mesh each peer's copy has a link of its
    own (S at the pair bandwidth). None across domains. Checked against SGLang PR #2904's table of the TensorRT-LLM
    kernel on 8 H100s (5.9 / 7.8 / 16.7 / 33.8 µs at 512 B / 32 KB / 256 KB / 1 MB; tests/cost)."""
    n = pm.size
    if n <= 1 or pm.domains != 1 or pm.up_bw <= 0:
        return None
    ramp = simple_ramp(S)
    if 0 < pm.pair_bw < pm.up_bw:
        t_bw = S / (pm.pair_bw * ramp)
    else:
        t_bw = (n - 1) * S / (pm.up_bw * ramp)
    t = pm.alpha_up_s + t_bw
    return CollectiveCost(t, "one_shot", S * bus_factor("all_reduce", n) / t, "scale_up", (n - 1) * S, "Simple",
                          pm.alpha_up_s)


def p2p_all_reduce_time(message_bytes: float, span: GroupSpan, system: System,
                        calibration: Calibration) -> CollectiveCost:
    """An all-reduce as a serving engine runs it: its one-shot peer-to-peer kernel inside one scale-up domain when
    that beats NCCL (small messages: one step of latency instead of a ring's 2(n − 1)), else NCCL's fastest
    (`collective_time`; the engines hand large messages and multi-node groups to NCCL)."""
    nccl = collective_time("all_reduce", message_bytes, span, system, calibration)  # 0 for one rank or no bytes
    one = None if span.others else one_shot_all_reduce(float(message_bytes), path_model(span, system, calibration))
    return one if one is not None and one.time_s < nccl.time_s else nccl
