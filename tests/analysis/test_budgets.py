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
    c = s.checkpoint
    assert f.write_s == pytest.approx(c.serialise_s + f.checkpoint_bytes / f.write_bw_bytes_per_s)


def test_communication_budget(default_analysis):
    c = default_analysis.communication
    assert c.dominant
    assert c.compression_saving_s >= 0
    assert {t.tier for t in c.tiers} == {"scale_up", "scale_out", "front_end"}


def test_sync_wait_closed_form_matches_seeded_monte_carlo(default_analysis):
    """The budget's expected wait for the slowest (σ·E[max of N normals], Blom/Harter closed form) agrees with the
    same budget sampled by seeded Monte Carlo within 3 %, point by point."""
    from narrowpath.analysis.inventory import build_inventory
    from narrowpath.analysis.options import AnalysisOptions
    from narrowpath.analysis.synchronisation import build_synchronisation
    ctx = default_analysis.context
    inv = build_inventory(ctx)
    closed = build_synchronisation(ctx, inv, AnalysisOptions(jitter_method="closed_form"))
    mc = build_synchronisation(ctx, inv, AnalysisOptions(jitter_method="sampled", seed=1, num_samples=20000))
    assert closed.jitter_wait_s == pytest.approx(mc.jitter_wait_s, rel=0.03)
    for a, b in zip(closed.points, mc.points):
        assert a.wait_each_s == pytest.approx(b.wait_each_s, rel=0.05)
        sigma = 0.02 * closed.segment_s
        assert a.wait_each_s == pytest.approx(sigma * expected_max_normal_blom(a.group_size))
    again = build_synchronisation(ctx, inv, AnalysisOptions(jitter_method="sampled", seed=1, num_samples=20000))
    assert again.jitter_wait_s == mc.jitter_wait_s  # seeded: reproducible


def test_daly_higher_order_by_hand():
    """Daly 2006 eq. 37 with δ/M not small (δ = 600 s, M = 3600 s), evaluated by hand."""
    d, m = 600.0, 3600.0
    x = d / (2 * m)
    by_hand = math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d
    assert F.daly_interval_s(d, m) == pytest.approx(by_hand)
    assert F.daly_interval_s(d, m) == pytest.approx(1697.71, rel=1e-4)  # 2078.46 × 1.10548 − 600
    assert F.young_interval_s(d, m) == pytest.approx(2078.46, rel=1e-4)


def test_failure_budget_of_the_default_scenario(default_analysis):
    """MTBF = 1 / (N × rate); the interval is Daly's for the checkpoint write time; goodput = 1 − waste."""
    a = default_analysis
    f = a.synchronisation.failures
    n = a.prediction.scenario.num_gpus
    rate = a.options.failures_per_gpu_hour
    assert f.mtbf_s == pytest.approx(3600 / (n * rate))
    assert f.interruptions_per_day == pytest.approx(n * rate * 24)
    assert f.daly_interval_s == pytest.approx(F.daly_interval_s(f.write_s, f.mtbf_s))
    assert f.young_interval_s == pytest.approx(math.sqrt(2 * f.write_s * f.mtbf_s))
    assert f.goodput == pytest.approx(1 - F.waste_fraction(f.daly_interval_s, f.write_s, f.mtbf_s,
                                                           a.options.restart_s + f.restore_s))


def test_lstm_cliff_points_are_model_runs(lstm_analysis):
    """Each point of the cliff is predict() at that hidden size: its core step is the core model's step, and the
    persistent step is the core step less the re-priced recurrent GEMMs (never more, never below compute-bound)."""
    import dataclasses

    from narrowpath.schedule.step import predict
    scn = lstm_analysis.prediction.scenario
    c = lstm_analysis.distance.persistence
    sram = scn.system.device.level("sram").capacity_bytes
    assert c.sram_bytes == sram
    for q in c.points[:: max(1, len(c.points) // 5)] + (c.points[-1],):
        p = predict(dataclasses.replace(scn, model=dataclasses.replace(scn.model, hidden=q.hidden)))
        assert q.core_step_s == pytest.approx(p.step_time_s, rel=1e-12)
        assert q.layer_weight_bytes == pytest.approx(8 * q.hidden ** 2 * 2 / scn.plan.tp, rel=0.01)
        assert q.fits_sram == (q.layer_weight_bytes <= c.usable_fraction * sram)
        assert q.step_s <= q.core_step_s
        assert q.useful_flop_per_s_per_gpu == pytest.approx(p.model_flop_per_step / q.step_s / scn.num_gpus)
    base = [q for q in c.points if q.hidden == scn.model.hidden]
    if base:
        assert base[0].core_step_s == pytest.approx(lstm_analysis.prediction.step_time_s)
    # the cliff: time per useful FLOP jumps when the weights stop fitting
    below = max((q for q in c.points if q.fits_sram), key=lambda q: q.hidden)
    above = min((q for q in c.points if not q.fits_sram), key=lambda q: q.hidden)
    assert above.hidden == below.hidden + 1 == c.hidden_limit + 1
    assert above.step_s / below.step_s > 1.1  # one more hidden unit costs > 10 % of the step
