"""How much of a transfer a step exposes: a bucketed gradient sync behind a window of compute, and the expert
exchange of one micro-batch hidden behind another's merged pass (Megatron-Core combined 1F1B, DeepSeek DualPipe)."""
from __future__ import annotations

import math

from narrowpath.cost.memory import in_flight_chunk_passes
from narrowpath.schedule.pipeline import dualpipe_paired_fraction, dualpipev_paired_fraction


def bucket_tail_s(total_s: float, n_buckets: float, window_s: float) -> float:
    """How long a bucketed transfer of `total_s` runs past the end of the `window_s` of compute that fills its
    buckets (PyTorch DDP / Megatron --overlap-grad-reduce, Li et al. VLDB 2020 §3.2.3). `n_buckets` = message /
    bucket size: ⌈n⌉ buckets, the last holding the remainder; bucket k is ready when the window has produced its
    last byte (k/n of the window; the last at its end) and the stream takes them in order, each once ready and
    the stream free, so the transfer ends at max_k (ready_k + what is left from bucket k on) — linear in k up to
    the last bucket, so the first, the next-to-last or the last bucket sets it: with ≥ 2 full buckets and a window
    shorter than the transfer, T − W + W/n (the first bucket only starts W/n into the window); with a long window,
    the last bucket. The event simulator plays the buckets one by one (schedule.sim.tail.grad_sync). An unlimited
    window (the search's lower bound, search.exact) gives 0: there the tail is the remainder bucket, which some
    bucket size makes as small as any."""
    if math.isinf(window_s):
        return 0.0
    n = max(1.0, n_buckets)
    last = math.ceil(n)
    first = window_s / n + total_s  # bucket 1 ready at W/n, the whole transfer after it
    end = window_s + total_s * (1.0 - (last - 1) / n)  # the last bucket (the remainder) at the window's end
    if last >= 2:  # the next-to-last bucket: ready at (⌈n⌉ − 1)/n of the window, two buckets' worth left
        end = max(end, (last - 1) * window_s / n + total_s * (1.0 - (last - 2) / n))
    return max(0.0, max(first, end) - window_s)


def exposed_after_bucketed_overlap(total_s: float, message_bytes: float, bucket_bytes: float, window_s: float,
                                   slowdown: float) -> float:
    """Exposed time of a bucketed transfer overlapped with `window_s` of compute: what runs past the window
    (bucket_tail_s: at least the last bucket, which cannot start before the window ends); the hidden rest slows
    the compute it shares the chip with."""
    n_buckets = max(1.0, message_bytes / bucket_bytes) if bucket_bytes > 0 else 1.0
    exposed = bucket_tail_s(total_s, n_buckets, window_s)
    hidden = total_s - exposed
    return exposed + slowdown * hidden


def staged_sync_exposed_s(exposed_s: list[float], bwd_s: list[float]) -> tuple[float, int]:
    """(exposed time, binding stage) of a 1F1B pipeline's gradient sync, stage by stage: `exposed_s[s]` is what
    stage s's own sync would expose after its own last backward, `bwd_s[s]` its per-micro-batch backward. The
    cool-down runs the last micro-batch's backward from the last stage down to stage 0, so stage s's last
    backward ends Σ_{i<s} bwd_s[i] before stage 0's (at least: a lower stage that lags ends later still), and its
    sync runs beside those backwards — Megatron-Core's 1F1B: "Other pipeline stages do grad reduction during
    pipeline bubble" (pipeline_parallel/schedules.py). The step waits for the last rank to finish (the optimizer's
    gradient-norm all-reduce spans every GPU), so it exposes max_s (exposed_s[s] − Σ_{i<s} bwd_s[i]); stage 0's term
    is never negative. The event simulator (schedule.sim.tail.grad_sync) times each stage's sync the same way."""
    best, arg, drain = -float("inf"), 0, 0.0
    for s, (e, b) in enumerate(zip(exposed_s, bwd_s)):
        if e - drain > best:
            best, arg = e - drain, s
        drain += b
    return max(0.0, best), arg


PAIR_PARTNERS = {"fwd": ("bwd", "recompute"), "bwd": ("fwd",), "recompute": ("fwd",)}
"""The passes a pass-pair transfer of each phase hides behind: a forward's behind the other micro-batch's backward
(with its recompute), a backward's (and its recompute's) behind the other micro-batch's forward."""


def paired_fraction(stage: int, pp: int, vpp: int, num_microbatches: int, schedule: str = "", group: int = 0) -> float:
    """Share of pipeline stage `stage`'s passes (chunk passes when interleaved) whose forward runs merged with
    another micro-batch's backward (and whose backward with another's forward); the rest run alone.

    Megatron-Core merges the two only in the steady state (`pipeline_parallel/schedules.py`,
    `forward_backward_helper_wrapper` → `combined_1f1b.py`); the warm-up forwards and the cool-down backwards run
    alone, and `get_pp_rank_microbatches` adds one warm-up forward under `overlap_moe_expert_parallel_comm` "to
    ensure the forward and backward computations are independent in all 1f1b steps". So on stage s of p:
      p = 1: F0 alone, (F1 + B0) … (F(m−1) + B(m−2)), B(m−1) alone (`combined_1f1b_schedule_for_no_pipelining`):
        1 of m forwards and 1 of m backwards alone.
      1F1B (v = 1): the p − s − 1 warm-up forwards of the schedule the model plays (schedule.pipeline) plus that
        one: min(m, p − s) of m alone, as many cool-down backwards. pp 4, m 8: stage 0 4 of 8, stage 3 1 of 8.
      interleaved (v > 1): 2·(p − s − 1) + (v − 1)·g warm-up chunk forwards (micro-batch groups of g = `group`,
        Megatron's `microbatch_group_size_per_vp_stage`, default p) plus one, at most the m·v chunk passes:
        min(m·v, 2·(p − s − 1) + (v − 1)·g + 1) of m·v. pp 4, v 2, m 8: stage 0 11 of 16, stage 3 5 of 16.
    Both counts are the stage's in-flight depth (cost.memory.in_flight_chunk_passes).
    Where the source differs: Megatron-Core runs the merged schedule with p > 1 only in its interleaved program
    (TransformerConfig asserts a virtual pipeline size; Megatron-LM turns vpp 1 into none), whose one-chunk warm-up
    would be 2·(p − s − 1) + 1; v = 1 here counts the same rule on the 1F1B program the pipeline is priced with.
    DualPipe (`schedule` "dualpipe", DeepSeek-V3) and DualPipeV ("dualpipev") pair their own way: the share is
    counted on their programs (schedule.pipeline.dualpipe_paired_fraction, dualpipev_paired_fraction)."""
    m, p, s = max(1, int(num_microbatches)), max(1, int(pp)), int(stage)
    if schedule == "dualpipe" and p > 1:
        return dualpipe_paired_fraction(s, p, m)
    if schedule == "dualpipev" and p > 1:
        return dualpipev_paired_fraction(s, p, m)
    v = max(1, int(vpp)) if p > 1 else 1
    passes = m * v
    return (passes - in_flight_chunk_passes(s, p, v, m, group=group)) / passes


def pass_pair_hidden_s(pair_s: dict, left_s: dict, paired: float) -> dict:
    """Per phase, the part of the pass-pair traffic `pair_s` (seconds per micro-batch: the expert dispatch and
    combine with `ep_overlap`) that hides, given `left_s`, the matrix work of each phase still free after the
    phase's own overlapped traffic. Megatron-Core's EP all-to-all overlap (`overlap_moe_expert_parallel_comm`,
    "combined 1F1B") and DeepSeek-V3's DualPipe (DeepSeek-AI 2024, §3.2.1) merge the forward of one micro-batch
    with the backward of another, so each one's all-to-all runs during the other's computation: a forward's traffic
    hides behind the partner's backward and recompute, a backward's and recompute's behind the partner's forward
    (PAIR_PARTNERS). A share 1 − `paired` of the passes has no partner and hides nothing: Megatron-Core runs them
    "alone, no a2a overlapping" (`combined_1f1b.py`), the exchange on the critical path of its own pass, whose
    experts wait for its dispatch and whose next layer waits for its combine."""
    P = {ph: pair_s.get(ph, 0.0) for ph in PAIR_PARTNERS}
    L = {ph: max(0.0, left_s.get(ph, 0.0)) for ph in PAIR_PARTNERS}
    back = P["bwd"] + P["recompute"]
    h_back = min(back, L["fwd"])
    with_partner = {"fwd": min(P["fwd"], L["bwd"] + L["recompute"]),
                    "bwd": h_back * P["bwd"] / back if back > 0 else 0.0,
                    "recompute": h_back * P["recompute"] / back if back > 0 else 0.0}
    return {ph: paired * with_partner[ph] for ph in PAIR_PARTNERS}

