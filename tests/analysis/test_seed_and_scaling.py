"""Scaling account: the issue's seed example, and the sweep's definitions of efficiency and interruptions."""
from __future__ import annotations

import pytest

from narrowpath.analysis.scaling import communication_share, strong_scaled_share


def test_seed_example_five_percent():
    """100 ms compute + 5 ms communication: communication is 5 ms of 105 ms (≈ 5 %) of the step."""
    assert communication_share(0.100, 0.005) == pytest.approx(5 / 105)
    assert round(communication_share(0.100, 0.005) * 100) == 5


def test_seed_example_one_third():
    """Compute shrunk tenfold to 10 ms with communication unchanged: 5 ms of 15 ms, a third."""
    assert strong_scaled_share(0.100, 0.005, 10.0) == pytest.approx(1 / 3)


def test_sweep_contains_base_point_with_unit_efficiency(default_analysis):
    """The base device count appears in both sweeps with efficiency 1 and the predicted step time."""
    a = default_analysis
    n0 = a.prediction.scenario.num_gpus
    for mode in ("strong", "weak"):
        base = [s for s in a.scaling if s.mode == mode and s.num_gpus == n0]
        assert len(base) == 1
        assert base[0].efficiency == pytest.approx(1.0)
        assert base[0].step_s == pytest.approx(a.prediction.step_time_s)


def test_strong_scaling_keeps_global_batch_and_weak_keeps_per_replica(default_analysis):
    a = default_analysis
    p = a.prediction.scenario.plan
    for s in a.scaling:
        if s.mode == "strong":
            assert s.gbs == p.gbs
        else:
            assert s.gbs / s.dp == pytest.approx(p.gbs / p.dp)


def test_strong_scaling_raises_communication_share(default_analysis):
    """Like the seed example: spreading fixed work over more GPUs leaves communication a larger share."""
    strong = sorted((s for s in default_analysis.scaling if s.mode == "strong"), key=lambda s: s.num_gpus)
    assert strong[-1].communication_share > strong[0].communication_share
    assert strong[-1].step_s < strong[0].step_s


def test_interruptions_grow_linearly_with_devices(default_analysis):
    rate = default_analysis.options.failures_per_gpu_hour
    for s in default_analysis.scaling:
        assert s.interruptions_per_day == pytest.approx(s.num_gpus * rate * 24)
