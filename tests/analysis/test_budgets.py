"""Distance (LSTM persistence cliff), synchronisation (jitter, slow node, Young/Daly) and communication budgets."""
from __future__ import annotations

import math

import numpy as np
import pytest

from narrowpath.analysis import failures as F
from narrowpath.analysis.jitter import (expected_max_normal_blom, expected_max_normal_gumbel,
                                        expected_max_normal_sampled)
from narrowpath.analysis.persistence import hidden_limit


def test_lstm_cliff_at_the_sram_limit(lstm_analysis):
    """GNMT LSTM on A100: FP16 layer weights 8·h²·2 bytes fit 75 % of 47.8 MB SRAM up to h = 1496; at that
    size the time per useful FLOP jumps (persistent → weights re-read from HBM every time step)."""
    c = lstm_analysis.distance.persistence
    assert c is not None
    usable = 0.75 * 47.8e6
    assert c.hidden_limit == hidden_limit(47.8e6, 0.75, 1) == math.floor(math.sqrt(usable / 16))
    below = [p for p in c.points if p.hidden == c.hidden_limit][0]
    above = [p for p in c.points if p.hidden == c.hidden_limit + 1][0]
    assert below.fits_sram and not above.fits_sram
    assert below.layer_weight_bytes <= usable < above.layer_weight_bytes
    assert c.cliff_ratio > 1.05
    assert below.step_s < below.core_step_s
    assert above.step_s == above.core_step_s


def test_lstm_weights_could_live_in_sram(lstm_analysis):
    """At the catalog's hidden size 1024, one layer's FP16 weights (16.8 MB) fit on chip."""
    w = {i.item: i for i in lstm_analysis.distance.items}["weights"]
    assert w.nearer_level == "sram"
    assert w.accesses_per_step > 100  # re-read every time step


def test_blom_matches_sampling():
    """The closed form agrees with seeded Monte Carlo within 2 % for group sizes 2..4096."""
    rng = np.random.default_rng(0)
    for n in (2, 8, 64, 512, 4096):
        s = expected_max_normal_sampled(n, rng, 20000 if n <= 64 else 4000)
        assert expected_max_normal_blom(n) == pytest.approx(s, rel=0.02)
    assert expected_max_normal_blom(2) == pytest.approx(1 / math.sqrt(math.pi), rel=0.01)
    assert expected_max_normal_gumbel(10 ** 6) == pytest.approx(expected_max_normal_blom(10 ** 6), rel=0.02)


def test_young_and_daly():
    """Young: √(2δM); Daly tends to Young for δ ≪ M; δ = 60 s, M = 1 day."""
    d, m = 60.0, 86400.0
    assert F.young_interval_s(d, m) == pytest.approx(math.sqrt(2 * d * m))
    assert F.daly_interval_s(d, m) == pytest.approx(F.young_interval_s(d, m) - d, rel=0.03)
    assert F.daly_interval_s(3 * m, m) == m
    assert F.job_mtbf_s(1000, 1e-5) == pytest.approx(3600 / 1e-2)


def test_sync_budget(default_analysis):
    a = default_analysis
    s = a.synchronisation
    p = a.prediction
    assert s.sync_points_per_step >= 1
    assert s.jitter_wait_s > 0
    assert s.slow_node_step_s == pytest.approx(p.step_time_s + 0.1 * (p.breakdown_s["compute"] + p.breakdown_s["bubble"]))
    assert s.bubble_s == pytest.approx(p.breakdown_s["bubble"])
    assert 0 < s.goodput < 1
    f = s.failures
    assert f.write_s == pytest.approx(f.checkpoint_bytes / f.write_bw_bytes_per_s)


def test_communication_budget(default_analysis):
    c = default_analysis.communication
    assert c.dominant
    assert c.compression_saving_s >= 0
    assert {t.tier for t in c.tiers} == {"scale_up", "scale_out", "front_end"}
