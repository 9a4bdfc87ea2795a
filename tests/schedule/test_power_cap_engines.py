"""A power cap slows the arithmetic in every engine, not only in `predict` (cost.power): the event simulator and the
serving cost price ops on the same capped device, so the simulator still reproduces the closed form without noise,
and a capped serving deployment's compute-bound prompt work slows by the clock fraction while memory-bound decode
at batch 1 keeps nearly all its speed (the HBM clock is not throttled)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.cost.power import capped_device, clock_fraction
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.step import predict
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _capped(scn, fraction_of_tdp: float):
    sysm = scn.system
    return dataclasses.replace(scn, system=dataclasses.replace(sysm, power_limit_w=fraction_of_tdp * sysm.device.tdp_w))


def test_noise_free_simulation_of_a_capped_board_equals_predict():
    """Llama-3 70B on 256 H100 at 60 % of the board power: predict and the noise-free simulator agree within 1 %
    (their uncapped agreement, tests/schedule/sim/test_consistency.py), and both are slower than uncapped."""
    base = load_scenario("llama3-70b-h100-256")
    capped = _capped(base, 0.6)
    p0, p1 = predict(base), predict(capped)
    s0 = simulate(base, steps=1).noise_free_step_time_s
    s1 = simulate(capped, steps=1).noise_free_step_time_s
    assert p1.step_time_s > 1.05 * p0.step_time_s
    assert s1 == pytest.approx(p1.step_time_s, rel=0.01)
    # the cap's slow-down is the same in both engines (before this, the simulator ignored the cap: s1 == s0)
    assert s1 / s0 == pytest.approx(p1.step_time_s / p0.step_time_s, rel=0.01)


def _serving_cost(sysm) -> ServingCost:
    load = Load(arrival="offline", input_tokens=2048, output_tokens=64, num_requests=8)
    scn = ServingScenario(system=sysm, model=model("llama3-8b"), plan=ServingPlan(), load=load, num_gpus=1)
    scn, _ = resolve_limits(resolve_formats(scn, ()))
    return ServingCost(scn, 8192)


def test_a_capped_board_serves_prompts_slower_and_decodes_at_nearly_the_same_speed():
    """H100 SXM (700 W rated, 120 W idle in the catalog) capped at 400 W: clock fraction √(280/580) = 0.6948
    (hand-computed from P − P_idle ∝ f²). A 4,096-token prompt chunk of Llama-3 8B is matrix-bound and slows by
    close to 1/0.6948; a one-token decode step reads the 16 GB of weights and is bandwidth-bound, so it slows by
    much less."""
    h100 = system("dgx-h100")
    dev = h100.device
    assert (dev.tdp_w, dev.idle_w) == (700.0, 120.0)
    assert clock_fraction(dev.tdp_w, dev.idle_w, 400.0) == pytest.approx(0.694808, abs=1e-6)
    capped_sys = dataclasses.replace(h100, power_limit_w=400.0)
    f = clock_fraction(dev.tdp_w, dev.idle_w, 400.0)
    free, capped = _serving_cost(h100), _serving_cost(capped_sys)
    assert capped.dev == capped_device(capped_sys) and free.dev is dev
    prompt = capped.token_time_s(0, 4096) / free.token_time_s(0, 4096)
    decode = capped.token_time_s(0, 1) / free.token_time_s(0, 1)
    assert 1.0 / f * 0.85 < prompt <= 1.0 / f + 1e-9
    assert 1.0 <= decode < 1.0 + 0.5 * (1.0 / f - 1.0)
