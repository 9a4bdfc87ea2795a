"""Schedule values the seed-26 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: the closed
form an interleaved split with a last micro-batch group of one falls back to, and the 1F1B path form where a heavy
stage's own warm-up forwards reach its first backward last — each pinned by a hand calculation."""
from __future__ import annotations

import pytest

from narrowpath.schedule.pipeline import one_f_one_b_time_s, pipeline_time_s, played_time_s


def test_an_interleaved_split_with_a_last_group_of_one_takes_narayanans_form():
    """5 micro-batches on pp 2 × vpp 2 (groups of p = 2: a last group of 5 mod 2 = 1 < p, a split Megatron-Core
    refuses and the simulator will not play), stages of 3 s whose two chunks take a quarter and three quarters of
    each pass. pipeline_time_s keeps Narayanan's interleaved form for such a split: m·t_max + (p − 1)·t_mean/v =
    5·3 + 1·3/2 = 16.5 s, whatever the chunk shares (it does not play the refused program)."""
    shares = [[0.25, 0.75], [0.25, 0.75]]
    assert pipeline_time_s([3.0, 3.0], 5, 2, chunk_weights=shares) == pytest.approx(16.5, rel=1e-12)


def test_the_1f1b_path_form_waits_for_a_heavy_stages_own_warm_up_forwards():
    """p = 3, m = 2, forward = backward = 1, 3, 1 s per stage. Megatron's 1F1B by hand: stage 0 runs its 2 warm-up
    forwards at 0–1 and 1–2; stage 1 (1 warm-up forward) F0 at 1–4, F1 at 4–7; stage 2 F0 4–5, B0 5–6, F1 7–8,
    B1 8–9; stage 1 B0 7–10 (after its own F1, not at 6 when stage 2's gradient arrives), B1 10–13; stage 0 B0
    10–11, B1 13–14: 14 s. In the path form (one_f_one_b_time_s) stage 1's first backward is reached through its
    own warm-up forwards, Σ_{i<1} F_i + 2·F_1 = 1 + 6 = 7 s (later than micro-batch 0's round trip
    ΣF + B_2 = 6 s), then its remaining 2·3 s of backward, then stage 0's 1 s: 7 + 6 + 1 = 14 s, the played
    program's."""
    fwd, bwd = [1.0, 3.0, 1.0], [1.0, 3.0, 1.0]
    assert one_f_one_b_time_s(fwd, bwd, 2) == 14.0
    assert played_time_s("1f1b", [[f] for f in fwd], [[b] for b in bwd], 2) == 14.0
