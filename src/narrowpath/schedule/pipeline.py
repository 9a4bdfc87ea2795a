"""Closed-form pipeline schedules.

1F1B (PipeDream-Flush; Narayanan et al. SC'21 §2.2.1): with m micro-batches on p stages of per-micro-batch
time T (forward + backward), the step takes (m + p − 1)·T; the bubble fraction is (p − 1)/m.
Interleaved 1F1B with v chunks per stage (§2.2.2): the bubble shrinks to (p − 1)·T/v.
With unequal stages the steady state runs at the slowest stage's pace and the fill/drain passes through every
stage once: t = m·T_max + (p − 1)·T_mean / v (our generalisation; equals the paper's forms for equal stages).
"""
from __future__ import annotations


def pipeline_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int = 1) -> float:
    """Time of the pipelined forward/backward part of one step."""
    p = len(stage_times_s)
    t_max = max(stage_times_s)
    if p == 1:
        return num_microbatches * t_max
    t_mean = sum(stage_times_s) / p
    return num_microbatches * t_max + (p - 1) * t_mean / vpp


def bubble_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int = 1) -> float:
    """Idle time of the busiest stage: the pipeline time minus its own work."""
    return pipeline_time_s(stage_times_s, num_microbatches, vpp) - num_microbatches * max(stage_times_s)


def bubble_fraction(pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Narayanan et al. SC'21: (p − 1)/(v·m), bubble time over ideal time."""
    return (pp - 1) / (vpp * num_microbatches)
