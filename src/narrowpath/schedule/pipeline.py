"""Closed-form pipeline schedules.

1F1B (PipeDream-Flush; Narayanan et al. SC'21 §2.2.1): with m micro-batches on p stages of per-micro-batch
time T (forward + backward), the step takes (m + p − 1)·T; the bubble fraction is (p − 1)/m.
Interleaved 1F1B with v chunks per stage (§2.2.2): the bubble shrinks to (p − 1)·T/v.

Unequal stages (embedding on the first, output layer and loss on the last, an uneven layer split) do not simply
run "at the slowest stage's pace plus a mean fill": the step event simulator (`schedule.sim`, the reference for
how schedules compose) plays Megatron's programs exactly, and these forms follow it:
- 1F1B, first stage ≤ equal middle stages ≤ last stage (a cheap embedding first, the output layer last): the
  step is the longest of p paths, one per candidate bottleneck stage b: micro-batch 0 reaches b's first
  backward (its forward through every stage and its backward back to b + 1, or b's own warm-up forwards if
  later), b then works without pause through its remaining passes, and the last gradient returns through the
  stages before b (`one_f_one_b_time_s`, O(p)); equal to the simulator there, within ~5 % of it for other
  imbalance. Other 1F1B imbalance (a heavier first stage, an uneven layer split) is played (`played_time_s`):
  exactly up to 4p micro-batches, then at the busiest stage's pace (within 0.9 % of playing them all). tests/schedule/sim/test_programs.py holds both to the simulator.
- Interleaved with unequal chunks inside a stage (an uneven layer split over p·v chunks, Llama 3 405B's 126
  layers in 16 × 7): the steady state is slower than the busiest stage (a stage's forward and backward chunks
  pair differently from its neighbours', and a batched exchange waits for both ends), so Megatron-Core's program
  is played exactly (`interleaved_time_s`); the time is affine in the number of micro-batch groups (g = p, or
  Megatron-Core's `microbatch_group_size_per_vp_stage`) once the play has settled, so at most three groups and the
  last (remainder) one are played and the rest extrapolated, each group taking at least the busiest stage's work for
  g micro-batches (with unequal chunks the play can still be settling at 3g). With equal stages and chunks the group
  does not change the time (Narayanan's form, checked against the play for groups p … m). Callers pass the chunks'
  shares of the forward and of the backward (`chunk_weights`, `bwd_chunk_weights`:
  schedule.chunks). With equal chunks and unequal stages Narayanan's interleaved form is kept: within
  0.6 % of the simulator on the validation corpora, and playing the program would cost ~10 ms per prediction at
  16 × 7 chunks (search calls predict per plan).
Equal stages keep Narayanan's forms.

DualPipe (DeepSeek-V3 report §3.2.1; `schedule.sim.programs.order_dualpipe`): rank i runs stage i of one direction
and stage p − 1 − i of the other, so its per-micro-batch work is the mean of the two; the program is played
exactly (`dualpipe_time_s`, O(m·p) on Python floats). With equal stages and the usual F : B : W = 1 : 2 : 1 its
bubble is the report's Table 2 form (PP/2 − 1)(F&B + B − 3W) exactly, with F&B = F + B when a merged pair takes
as long as its two passes (`dualpipe_bubble_s`); at other ratios Table 2 is the report's estimate and the played
program differs from it (pp 16, F = B = 2W: 14 F of bubble against Table 2's 10.5; tests/schedule/test_dualpipe.py).
The passes run in the source's order; its sends are posted as each pass ends, where the source holds a few back to
batch them with the next pass's (step 2's forward outputs, the middle ranks' first steady-state pair): with them
the pp 16, F = B = 2W bubble is 14.5 F, at 1 : 2 : 1 the same (an independent transliteration, review of the
tenth session); the difference is left out.
"""
from __future__ import annotations

from functools import lru_cache

from narrowpath.schedule.sim.graph import graph_1f1b, graph_interleaved, graph_time_s
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import build_programs, order_dualpipe, order_dualpipev
from narrowpath.spec.plan import interleave_groups_ok

_REL_EQUAL = 1e-12


def _uniform(values: list[float]) -> bool:
    lo, hi = min(values), max(values)
    return hi - lo <= _REL_EQUAL * max(abs(hi), 1e-300)


def pipeline_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int = 1, *,
                    fwd_times_s: list[float] | None = None,
                    chunk_weights: list[list[float]] | None = None,
                    bwd_chunk_weights: list[list[float]] | None = None, overlapped_send_s: float = 0.0,
                    group: int = 0) -> float:
    """Time of the pipelined forward/backward part of one step (`group`: the interleaved schedule's micro-batch
    group, Plan.interleave_group; 0 = p).

    `fwd_times_s`: each stage's forward part of its per-micro-batch time (default a third: backward = 2×
    forward); only unequal stages need it. `chunk_weights`: per stage, the share of its forward each of its vpp
    chunks takes (default equal), `bwd_chunk_weights` of its backward (default the forward's).
    `overlapped_send_s`: the time of one pipeline message when the sends run beside
    compute (Megatron-Core overlap_p2p_comm) and so are not in the stage times: the fill and the drain still wait
    for them at the chunk boundaries the groups leave no slack at (`fill_drain_latency_s`)."""
    latency = 0.0
    if overlapped_send_s:
        p, m, g = len(stage_times_s), num_microbatches, group or len(stage_times_s)
        f0 = fwd_times_s[0] if fwd_times_s else stage_times_s[0] / 3.0
        b1 = stage_times_s[-1] - (fwd_times_s[-1] if fwd_times_s else stage_times_s[-1] / 3.0)
        r = m % g  # the last group; a split Megatron-Core refuses (r < p) is charged every boundary, as before
        last = r if r >= p else g
        fwd_c = bwd_c = None  # the chunk times matter only where groups leave slack (fill_drain_latency_s)
        if vpp > 1 and (g != p or last != p):
            bw = bwd_chunk_weights or chunk_weights
            fwd_c = [f0 * w for w in chunk_weights[0]] if chunk_weights else [f0 / vpp] * vpp
            bwd_c = [b1 * w for w in bw[-1]] if bw else [b1 / vpp] * vpp
        latency = fill_drain_latency_s(p, vpp, overlapped_send_s, g, last, fwd_c, bwd_c)
    return _pipeline_time_s(stage_times_s, num_microbatches, vpp, fwd_times_s, chunk_weights,
                            bwd_chunk_weights or chunk_weights, group) + latency


def fill_drain_latency_s(pp: int, vpp: int, message_s: float, group: int = 0, last_group: int = 0,
                         fwd_chunk_s: list[float] | None = None, bwd_chunk_s: list[float] | None = None) -> float:
    """Overlapped pipeline sends still sit on the fill's and the drain's chain: micro-batch 0's forward crosses
    p·v − 1 chunk boundaries, the last gradient as many back: 2·(p·v − 1)·message with Megatron-Core's default
    micro-batch groups (g = p). With groups of g > p (`group`; `last_group` L, the last one's size) stage 0 still has
    g − p forwards of chunk c to run when micro-batch 0 comes round the ring for chunk c + 1, so each of the v − 1
    wraps of the fill waits only max(0, p·message − (g − p)·F_c) (`fwd_chunk_s[c]`: stage 0's forward of chunk c),
    and the drain's likewise behind the last stage's L − p backwards of chunk c (`bwd_chunk_s[c]`): each of fill and
    drain (p − 1)·message plus those waits. Equal to the played program while a message is shorter than a pass
    (tests/schedule/test_vp_group.py)."""
    if pp <= 1:
        return 0.0
    g, L = group or pp, last_group or group or pp
    if g == pp and L == pp or vpp == 1:
        return 2.0 * (pp * vpp - 1) * message_s
    fwd, bwd = fwd_chunk_s or [0.0] * vpp, bwd_chunk_s or [0.0] * vpp
    fill = sum(max(0.0, pp * message_s - (g - pp) * fwd[c]) for c in range(vpp - 1))
    drain = sum(max(0.0, pp * message_s - (L - pp) * bwd[c]) for c in range(1, vpp))
    return 2.0 * (pp - 1) * message_s + fill + drain


def _pipeline_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int,
                     fwd_times_s: list[float] | None, chunk_weights: list[list[float]] | None,
                     bwd_weights: list[list[float]] | None = None, group: int = 0) -> float:
    p = len(stage_times_s)
    m = num_microbatches
    g = group or p
    t_max = max(stage_times_s)
    if p == 1:
        return m * t_max
    bwd_weights = bwd_weights or chunk_weights
    equal_chunks = chunk_weights is None or all(_uniform(list(w)) for w in chunk_weights + bwd_weights)
    if (_uniform(list(stage_times_s)) and equal_chunks) or (vpp > 1 and (0 < m % g < p or m < g)):
        # equal stages; or an interleaved split Megatron-Core refuses (a last group shorter than p): Narayanan's form
        t_mean = sum(stage_times_s) / p
        return m * t_max + (p - 1) * t_mean / vpp
    fwd = fwd_times_s or [t / 3.0 for t in stage_times_s]
    if vpp == 1:
        bwd = [t - f for t, f in zip(stage_times_s, fwd)]
        mid = list(stage_times_s[1:-1]) or [stage_times_s[0]]
        if _uniform(mid) and stage_times_s[0] <= mid[0] <= stage_times_s[-1]:
            return one_f_one_b_time_s(fwd, bwd, m)
        # play the first 4p micro-batches exactly; the steady state then runs at the busiest stage's pace (within
        # 0.9 % of playing all m for random per-stage imbalance; the play costs O(p²), not O(m·p))
        played = min(m, 4 * p)
        return played_time_s("1f1b", [[f] for f in fwd], [[b] for b in bwd], played) + (m - played) * t_max
    if equal_chunks:
        t_mean = sum(stage_times_s) / p
        return m * t_max + (p - 1) * t_mean / vpp
    return interleaved_time_s([[f * w for w in ws] for f, ws in zip(fwd, chunk_weights)],
                              [[(t - f) * w for w in ws] for t, f, ws in zip(stage_times_s, fwd, bwd_weights)], m,
                              group)


def bubble_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int = 1, **kw) -> float:
    """Idle time of the busiest stage: the pipeline time minus its own work."""
    return pipeline_time_s(stage_times_s, num_microbatches, vpp, **kw) - num_microbatches * max(stage_times_s)


def bubble_fraction(pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Narayanan et al. SC'21: (p − 1)/(v·m), bubble time over ideal time."""
    return (pp - 1) / (vpp * num_microbatches)


def one_f_one_b_time_s(fwd_s: list[float], bwd_s: list[float], m: int) -> float:
    """1F1B with per-stage forward and backward times (module docstring): max over bottleneck stages b of
    max(ΣF + Σ_{i>b} B_i, Σ_{i<b} F_i + (w_b + 1)·F_b) + (b's remaining passes) + Σ_{i<b} B_i,
    with w_b = min(p − b − 1, m) warm-up forwards (Megatron-LM's order)."""
    p = len(fwd_s)
    total_f = sum(fwd_s)
    best = 0.0
    f_before = b_before = 0.0
    b_after = sum(bwd_s)
    for b in range(p):
        b_after -= bwd_s[b]
        w = min(p - b - 1, m)
        ahead = min(w + 1, m)
        reach = max(total_f + b_after, f_before + ahead * fwd_s[b])
        rest = m * bwd_s[b] + (m - ahead) * fwd_s[b]
        best = max(best, reach + rest + b_before)
        f_before += fwd_s[b]
        b_before += bwd_s[b]
    return best


def played_time_s(schedule: str, fwd_s: list[list[float]], bwd_s: list[list[float]], m: int,
                  mode: str = "rendezvous", group: int = 0) -> float:
    """Play Megatron's program (`schedule.sim.playback`: the simulator's rules without noise, pipeline messages
    of zero time since the stage times already include them) with per-stage, per-chunk pass times (`group`: the
    interleaved schedule's micro-batch group, 0 = p)."""
    p, v = len(fwd_s), len(fwd_s[0])
    durations = {}
    for i in range(p):
        for c in range(v):
            durations[(i, "F", c)] = fwd_s[i][c]
            durations[(i, "BW", c)] = bwd_s[i][c]
    if (schedule, mode) == ("1f1b", "rendezvous") and v == 1:  # the same result, compiled (sim.graph)
        return graph_time_s(graph_1f1b(p, m), durations)
    if (schedule, mode) == ("interleaved", "async") and v > 1 and interleave_groups_ok(p, m, group):
        return graph_time_s(graph_interleaved(p, v, m, group), durations)
    programs = build_programs(schedule, p, v, m, mode == "async", group if schedule == "interleaved" else 0)
    return max(play(programs, durations, {"F": 0.0, "B": 0.0}, mode=mode).ends_s)


def interleaved_time_s(fwd_s: list[list[float]], bwd_s: list[list[float]], m: int, group: int = 0) -> float:
    """Interleaved 1F1B (Megatron-Core `forward_backward_pipelining_with_interleaving`, micro-batches in groups of
    g per chunk — `group`, default p — pipeline sends overlapped with compute: overlap_p2p_comm) with per-stage,
    per-chunk forward and backward times, played exactly; past three groups (and the last, shorter one: m mod g
    micro-batches) the time grows by the same amount per group, so it is extrapolated from 2g + r and 3g + r
    (module docstring) — by at least the busiest stage's work for g micro-batches per group: with unequal chunks
    the play can still be settling at 3p (a Llama-3 70B plan, pp 8 × vpp 6: 0.730 s from 2p to 3p, 0.751 s from 3p
    to 4p, p × the busiest stage 0.753 s; 256 micro-batches extrapolated 2.8 % below the whole program played, now
    0.01 % above it)."""
    g = group or len(fwd_s)
    r = m % g
    if m <= 3 * g + r:
        return played_time_s("interleaved", fwd_s, bwd_s, m, "async", group)
    t2 = played_time_s("interleaved", fwd_s, bwd_s, 2 * g + r, "async", group)
    t3 = played_time_s("interleaved", fwd_s, bwd_s, 3 * g + r, "async", group)
    busiest = max(sum(f) + sum(b) for f, b in zip(fwd_s, bwd_s))
    return t3 + (m // g - 3) * max(t3 - t2, g * busiest)


def dualpipe_bubble_s(pp: int, fb_s: float, b_s: float, w_s: float) -> float:
    """DeepSeek-V3 report, Table 2: DualPipe's pipeline bubble (PP/2 − 1)(F&B + B − 3W), with F&B the time of a
    forward and a backward merged, B a full backward, W its weight-gradient part (1F1B: (PP − 1)(F + B))."""
    return (pp / 2 - 1) * (fb_s + b_s - 3 * w_s)


def dualpipe_time_s(fwd_s: list[float], bwd_s: list[float], wgrad_s: list[float], m: int) -> float:
    """Time of the pipelined part of a DualPipe step with per-stage forward, full backward and weight-gradient
    times of one micro-batch, m micro-batches in all (m/2 per direction): the program played, pipeline messages of
    zero time (the stage times already include them), sends posted as soon as a pass ends (the source posts
    asynchronous isend / irecv, holding a few back to batch them: module docstring). Rank i runs stage i as chunk 0
    and stage p − 1 − i as chunk 1."""
    p = len(fwd_s)
    pair = [(i, p - 1 - i) for i in range(p)]
    return _two_chunk_time_s("dualpipe", 1, *([[x[a], x[b]] for a, b in pair] for x in (fwd_s, bwd_s, wgrad_s)), m)


def dualpipev_time_s(fwd_s: list[list[float]], bwd_s: list[list[float]], wgrad_s: list[list[float]], m: int) -> float:
    """Time of the pipelined part of a DualPipeV step with per-stage, per-chunk forward, full backward and
    weight-gradient times of one micro-batch (chunk 0: virtual stage i, chunk 1: 2p − 1 − i), every one of the m
    micro-batches through both: the program played (schedule.sim.programs.order_dualpipev) as DualPipe's is."""
    return _two_chunk_time_s("dualpipev", 2, fwd_s, bwd_s, wgrad_s, m)


def _two_chunk_time_s(schedule: str, v: int, fwd_s: list[list[float]], bwd_s: list[list[float]],
                      wgrad_s: list[list[float]], m: int) -> float:
    """A DualPipe-family program played with each rank's two chunks' forward, full backward (BW) and
    weight-gradient (W) times, its input-gradient backward B = BW − W; messages of zero time, eager sends."""
    durations = {}
    for i in range(len(fwd_s)):
        for c in (0, 1):
            durations[(i, "F", c)] = fwd_s[i][c]
            durations[(i, "BW", c)] = bwd_s[i][c]
            durations[(i, "B", c)] = bwd_s[i][c] - wgrad_s[i][c]
            durations[(i, "W", c)] = wgrad_s[i][c]
    programs = build_programs(schedule, len(fwd_s), v, m)
    return max(play(programs, durations, {"F": 0.0, "B": 0.0}, mode="eager").ends_s)


@lru_cache(maxsize=1024)
def dualpipe_paired_fraction(stage: int, pp: int, m: int) -> float:
    """Share of pipeline stage `stage`'s passes that run merged with a pass of the other direction (F&B) under
    DualPipe: its forwards and backwards on rank `stage` (direction 0) and on rank p − 1 − `stage` (direction 1),
    counted on the program (schedule.sim.programs.order_dualpipe)."""
    counts = [_pair_counts(order_dualpipe(pp, m, rank), chunk) for rank, chunk in ((stage, 0), (pp - 1 - stage, 1))]
    paired, total = (sum(c[k] for c in counts) for k in (0, 1))
    return paired / total if total else 0.0


@lru_cache(maxsize=1024)
def dualpipev_paired_fraction(stage: int, pp: int, m: int) -> float:
    """Share of stage `stage`'s chunk passes (forwards and backwards, not the deferred weight gradients) that run
    merged with a pass of its other chunk (F&B) under DualPipeV, counted on its program."""
    paired, total = _pair_counts(order_dualpipev(pp, m, stage))
    return paired / total if total else 0.0


def _pair_counts(groups, chunk: int | None = None) -> tuple[int, int]:
    """(passes run merged in a group of two, all passes) of a program's forwards and backwards — of `chunk` only
    when given — its deferred weight gradients left out."""
    paired = total = 0
    for grp in groups:
        for op in grp:
            if op.kind != "W" and chunk in (None, op.chunk):
                total += 1
                paired += len(grp) == 2
    return paired, total
