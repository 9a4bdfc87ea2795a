"""Every number traces back to the core model: ledger, inventory, overlap, energy and timeline agree with predict."""
from __future__ import annotations

import pytest

from narrowpath.analysis.ledger import LEVELS


def test_inventory_totals_match_prediction(any_analysis):
    """Sums over the inventory equal sums over the prediction's transfer rows."""
    a = any_analysis
    p = a.prediction
    assert sum(r.total_s for r in a.collectives) == pytest.approx(sum(t.total_s for t in p.transfers))
    assert sum(r.critical_path_s for r in a.collectives) == pytest.approx(sum(t.exposed_s for t in p.transfers))
    assert sum(r.count_per_step for r in a.collectives) == pytest.approx(sum(t.count for t in p.transfers))


def test_exposed_communication_matches_breakdown(any_analysis):
    """The inventory's critical-path time equals the breakdown's exposed communication (TP, CP, EP, PP, DP)."""
    a = any_analysis
    exposed = sum(v for k, v in a.prediction.breakdown_s.items() if k.startswith("exposed_"))
    assert sum(r.critical_path_s for r in a.collectives) == pytest.approx(exposed, rel=1e-9, abs=1e-12)


def test_ledger_hbm_is_the_workload_bytes(any_analysis):
    """HBM bytes per step are the workload's hbm_bytes × executions; time at bandwidth is bytes / HBM bw."""
    a = any_analysis
    p = a.prediction
    wl = p.workload
    crit = a.context.critical_stage
    m = wl.num_microbatches
    expect = sum(op.hbm_bytes * c * m for op, c in wl.stages[crit].ops) + sum(op.hbm_bytes * c for op, c in wl.optimizer_ops)
    row = {r.level: r for r in a.data_movement}["hbm"]
    assert row.bytes_per_step == pytest.approx(expect)
    assert row.time_at_bw_s == pytest.approx(expect / p.scenario.system.device.hbm.bw_bytes_per_s)
    assert row.share_of_step == pytest.approx(row.time_at_bw_s / p.step_time_s)
    assert row.bytes_per_useful_flop == pytest.approx(expect / (p.model_flop_per_step / p.scenario.num_gpus))


def test_ledger_network_modelled_time_matches_transfers(any_analysis):
    """The network tiers' modelled time is every transfer's time split over the tiers its bytes cross in proportion
    to bytes / line rate (recomputed here from the tier bytes); the tiers add up to the transfers' total, and a
    tier that carries bytes is charged time."""
    from narrowpath.analysis.traffic import row_tier_bytes
    a = any_analysis
    scn = a.prediction.scenario
    rows = {r.level: r for r in a.data_movement}
    assert tuple(rows) == LEVELS
    want = {"scale_up": 0.0, "scale_out": 0.0}
    for t in a.prediction.transfers:
        need = {k: b / scn.system.tier(k).bw_bytes_per_s_per_gpu for k, b in row_tier_bytes(scn, t).items()}
        for k, v in need.items():
            want[k] += t.total_s * v / sum(need.values())
        if not need and t.tier in want:
            want[t.tier] += t.total_s
    for tier in ("scale_up", "scale_out"):
        assert rows[tier].modelled_s == pytest.approx(want[tier], rel=1e-9, abs=1e-15)
        assert (rows[tier].modelled_s > 0) == (rows[tier].bytes_per_step > 0) or not rows[tier].bytes_per_step
    on_network = sum(t.total_s for t in a.prediction.transfers if t.tier in want)
    assert rows["scale_up"].modelled_s + rows["scale_out"].modelled_s == pytest.approx(on_network, rel=1e-9)


def test_compute_ops_sum_to_the_stage_compute(any_analysis):
    """Per-op times (op_time_s) of the critical stage add up to its compute, less the overlap slowdown and the
    time the GPU waits for the host."""
    a = any_analysis
    p = a.prediction
    cs = p.stages[a.context.critical_stage]
    m = p.workload.num_microbatches
    ops = sum(r.total_s for r in a.context.ops if r.op.phase != "optimizer")
    slow = sum(r.compute_slowdown_s for r in a.overlap.rows if r.phase != "step")
    assert ops + slow + m * cs.host_wait_s == pytest.approx(m * (cs.fwd_compute_s + cs.bwd_compute_s), rel=1e-9)


def test_energy_adds_up(any_analysis):
    """Total = FLOP energy + per-level byte energy + static; FLOP energy uses the catalog pJ/FLOP."""
    a = any_analysis
    e = a.energy
    p = a.prediction
    dev = p.scenario.system.device
    n = p.scenario.num_gpus
    assert e.total_j == pytest.approx(e.flop_j + sum(e.bytes_j.values()) + e.static_j)
    assert e.static_j == pytest.approx(dev.idle_w * n * p.step_time_s)
    assert e.flop_j == pytest.approx(p.hardware_flop_per_step * e.pj_per_flop * 1e-12)
    assert min(dev.energy_pj_per_flop.values()) <= e.pj_per_flop <= max(dev.energy_pj_per_flop.values())
    for r in a.data_movement:
        assert e.bytes_j[r.level] == pytest.approx(r.bytes_per_step * n * dev.energy_pj_per_byte.get(r.level, 0) * 1e-12)
    assert e.per_token_j == pytest.approx(e.total_j / p.workload.tokens_per_step)
    assert e.avg_power_per_gpu_w < dev.tdp_w


def test_overlap_serialised_step_is_not_faster(any_analysis):
    o = any_analysis.overlap
    assert o.serialised_step_s >= o.step_s - 1e-12
    for r in o.rows:
        assert r.hidden_s + r.exposed_s == pytest.approx(r.total_s)
        assert r.net_saving_s == pytest.approx(r.hidden_s - r.compute_slowdown_s)


def test_verdict_components_sum_to_step(any_analysis):
    v = any_analysis.verdict
    assert sum(v.components_s.values()) == pytest.approx(any_analysis.prediction.step_time_s)
    assert 0 < v.share <= 1
    assert f"({v.share:.0%} of the step)" in v.sentence
    assert v.narrowest != "matrix_compute"
    assert v.components_s[v.narrowest] == max(x for k, x in v.components_s.items() if k != "matrix_compute")
