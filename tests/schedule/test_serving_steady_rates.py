"""The steady state's capacity arithmetic for disaggregated deployments (schedule.serving_steady): each phase's rate
per instance and the instance counts that match them (DistServe's replication step, Zhong et al. OSDI 2024 §4.1),
and the prefill pool priced with the calibration the caller gives."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from narrowpath.catalog import calibration_for, model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import Limits, resolve_formats, resolve_limits
from narrowpath.schedule.serving_steady import (decode_batch, decode_capacity, decode_rate_per_s, matched_split,
                                               prefill_rate_per_s, steady_lane)
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def test_matched_split_by_hand():
    """16 GPUs, decode instances of 4 GPUs at 10 requests/s, prefill instances of 2 GPUs at 7 prompts/s: the exact
    fills are (3 decode, 2 prefill) -> min(14, 30) = 14, (2, 4) -> min(28, 20) = 20 and (1, 6) -> min(42, 10) = 10
    (1, 3, 5 prefill instances leave 14, 10, 6 GPUs, no whole decode instance count): (2, 4)."""
    split = matched_split(16, 4, 2, 10.0, 7.0)
    assert split == (2, 4) and all(type(x) is int for x in split)  # instance counts, whole
    assert matched_split(16, 4, 2, 100.0, 1.0) == (1, 6)  # prefill-bound: as many prefill instances as fit
    assert matched_split(16, 4, 2, 1.0, 100.0) == (3, 2)  # decode-bound: the fewest prefill GPUs that leave room
    assert matched_split(5, 2, 2, 1.0, 1.0) is None  # 1 prefill leaves 3 GPUs (odd), 2 leave 1: no exact fill
    assert matched_split(8, 8, 1, 1.0, 1.0) is None  # no room for both
    assert matched_split(8, 2, 2, 2.0, 2.0) == (2, 2)  # (3, 1): min(2, 6) = 2; (2, 2): min(4, 4) = 4; (1, 3): 2
    # a tie goes to the fewer prefill GPUs: 5 GPUs of 1, prefill 3/s, decode 1/s: (4, 1) and (3, 2) both serve 3
    assert matched_split(5, 1, 1, 1.0, 3.0) == (4, 1)


@pytest.mark.parametrize("n,dg,pg,dr,pr", [(16, 4, 2, 3.0, 5.0), (12, 3, 1, 0.5, 0.2), (24, 8, 4, 1.0, 9.0),
                                           (10, 1, 1, 2.0, 3.0)])
def test_matched_split_is_the_best_exact_fill(n, dg, pg, dr, pr):
    """Against every exact fill enumerated independently: none serves a higher rate."""
    got = matched_split(n, dg, pg, dr, pr)
    fills = [(d, p) for p in range(1, n) for d in range(1, n) if d * dg + p * pg == n]
    assert got in fills
    assert min(got[1] * pr, got[0] * dr) == max(min(p * pr, d * dr) for d, p in fills)


class _Cost:
    """A cost model whose every iteration takes `s` seconds (records what it was asked)."""

    def __init__(self, s):
        self.s, self.calls = s, []

    def iteration_s(self, *args):
        self.calls.append(args)
        return self.s


def test_phase_rates_by_hand():
    """Prefill: 2 lanes, a budget of 8,192 tokens of 1,024-token prompts in 0.5 s per iteration -> 2 · 8 / 0.5 = 32
    prompts/s, priced as one iteration of 8 whole prompts (8,192 · 1,025 / 2 causal pairs). Decode: 2 lanes of 64
    sequences, 128 outputs each, 20 ms per step -> 2 · 64 / 128 / 0.02 = 50 requests/s, the step priced at the mean
    context 64 · (1,024 + 64)."""
    c = _Cost(0.5)
    assert prefill_rate_per_s(c, 2, 8192, 1024) == pytest.approx(32.0)
    assert c.calls == [(8192, 0, 0, 8192, 8192 * 1025 / 2, 8192, 8.0)]
    c = _Cost(0.02)
    assert decode_rate_per_s(c, 2, 64, 1024, 128) == pytest.approx(50.0)
    # priced as a decode-only lane prices its step (serving_run.step_pricer): 64 query tokens, 64 rows, no drafts
    assert c.calls == [(64, 64, 64 * (1024 + 64), 0, 0, 0, 64, 1, None, 0.0)]


def _pooled(cal=None):
    """Llama-3 8B on H100: two tp-2 decode instances and one single-GPU prefill instance of its own layout."""
    plan = ServingPlan(tp=2, replicas=3, prefill_replicas=1, prefill_tp=1)
    load = Load(arrival="poisson", rate_per_s=20.0, input_tokens=2048, output_tokens=8, num_requests=40)
    return ServingScenario(name="pooled", system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=load,
                           num_gpus=plan.num_gpus, calibration=cal)


def _slow(cal):
    return dataclasses.replace(cal, matrix_efficiency={k: v / 2 for k, v in cal.matrix_efficiency.items()},
                               flash_efficiency=cal.flash_efficiency / 2)


def test_a_calibration_given_to_simulate_prices_the_prefill_pool_too():
    """Halving the tensor-core rates (GEMMs and attention) of the profile handed to `simulate` — not carried by the
    scenario — makes the 2,048-token prompts' prefill on the pool's own GPU markedly slower: the pool is priced
    with it, not with the device's default."""
    cal = calibration_for("H100-SXM5-80GB")
    base = simulate(_pooled()).result
    slow = simulate(_pooled(), (), _slow(cal)).result
    pre = lambda r: float(np.median(r.kv_ready_s - r.arrival_s))  # noqa: E731 - arrival to KV ready: the prefill
    assert pre(slow) > 1.5 * pre(base)


def test_the_steady_state_prices_the_pool_with_the_given_calibration():
    cal = calibration_for("H100-SXM5-80GB")
    base, slow = steady_lane(_pooled()), steady_lane(_pooled(), None, _slow(cal))
    assert slow.ttft_s["p50"] > 1.3 * base.ttft_s["p50"]


def test_a_handed_prefill_cost_is_what_simulate_prices_the_pool_with():
    """`simulate(prefill_cost=...)` prices the prefill pool with the cost model handed in (the steady state builds it
    once): a pool cost built under a profile of half the tensor-core rates slows the prompts, although simulate
    itself is given no calibration."""
    scn = _pooled()
    pool = scn.plan.prefill_pool()
    pscn, lim = resolve_limits(resolve_formats(dataclasses.replace(scn, plan=pool, num_gpus=pool.num_gpus), ()))
    slow_cost = ServingCost(pscn, max(lim.max_num_tokens, lim.max_batch), _slow(calibration_for("H100-SXM5-80GB")))
    base = simulate(scn).result
    slow = simulate(scn, prefill_cost=slow_cost).result
    pre = lambda r: float(np.median(r.kv_ready_s - r.arrival_s))  # noqa: E731
    assert pre(slow) > 1.5 * pre(base)


def _lim(kv_tokens, block=32):
    """Limits of a lane whose rank holds `kv_tokens` tokens of KV in blocks of `block` (the rest unread here)."""
    return Limits(0, 0, block, 0.0, SimpleNamespace(kv_tokens=kv_tokens, footprint=lambda n: n))  # no window


def test_decode_batch_by_hand():
    """100,000 KV tokens a lane (3,125 blocks of 32): 8,192-token prompts with 1,024 outputs reserve 9,216 tokens
    (288 blocks) each -> 10 sequences; on demand they average 8,704 (272 blocks) -> 11; a limit below that binds; a
    cache too small for one sequence still runs one; two stages share the cache (pp 2 -> 5)."""
    assert decode_batch(_lim(100_000), 1, 64, 8192, 1024, "reserve") == 10
    assert decode_batch(_lim(100_000), 1, 64, 8192, 1024, "on-demand") == 11
    assert decode_batch(_lim(100_000), 1, 4, 8192, 1024, "reserve") == 4
    assert decode_batch(_lim(1_000), 1, 64, 8192, 1024, "reserve") == 1
    assert decode_batch(_lim(100_000), 2, 64, 8192, 1024, "reserve") == 5
    assert type(decode_batch(_lim(100_000), 1, 64, 8192, 1024, "reserve")) is int
    # 10,000 tokens of blocks of 10, 1,000 + 1,000 tokens: reserved 2,000 (200 blocks) -> 5, on demand 1,500 -> 6
    assert decode_batch(_lim(10_000, 10), 1, 64, 1000, 1000, "reserve") == 5
    assert decode_batch(_lim(10_000, 10), 1, 64, 1000, 1000, "on-demand") == 6


def test_decode_capacity_is_the_full_batch_at_its_rate():
    """Two lanes under a limit of 64 whose KV cache holds 10 reserved 8,192 + 1,024-token sequences (above): each
    lane decodes 10 at a time, its step priced at their mean context 10 · (8,192 + 512) -> 2 · 10 / 1,024 / 0.02 s
    = 0.977 requests/s (a token budget of 8,192 holds more decodes than that)."""
    c = _Cost(0.02)
    lim = Limits(64, 8192, 32, 0.0, SimpleNamespace(kv_tokens=100_000, footprint=lambda n: n))
    rate, batch = decode_capacity(c, lim, 2, 1, 8192, 1024, "reserve")
    assert batch == 10 and rate == pytest.approx(2 * 10 / 1024 / 0.02)
    assert c.calls == [(10, 10, 10 * (8192 + 512), 0, 0, 0, 10, 1, None, 0.0)]  # a decode lane's step


@pytest.mark.parametrize("prefill_replicas,kv_fraction", [(1, 0.07), (1, 0.9), (2, 0.07)])
def test_the_steady_state_sizes_its_stream_by_both_phases(monkeypatch, prefill_replicas, kv_fraction):
    """A disaggregated steady state is fed at 0.9 × the lesser of its prefill and decode capacities, each summed
    over its instances' lanes (dp · pp = 2 here: two stages), the decode batch what the KV cache holds under the
    plan's admission (reserve: at a 7 % KV share 8 of the 64 allowed, 9 were it on demand; at 90 % all 64). Read off
    the stream the steady state hands to simulate, against the capacities priced by hand with its own cost model."""
    import narrowpath.schedule.serving_steady as st
    seen = {}
    real = st.simulate

    def spy(scn, *args, **kw):
        seen["rate"], seen["cost"] = scn.load.rate_per_s, kw["cost"]
        return real(scn, *args, **kw)

    monkeypatch.setattr(st, "simulate", spy)
    plan = ServingPlan(tp=1, pp=2, replicas=3, prefill_replicas=prefill_replicas, admission="reserve",
                       kv_memory_fraction=kv_fraction, max_batch=64)
    scn = ServingScenario(name="k", system=system("dgx-h100"), model=model("llama3-8b"), plan=plan,
                          load=Load(input_tokens=4096, output_tokens=512), num_gpus=plan.num_gpus)
    st.steady_lane(scn)
    _, lim = resolve_limits(resolve_formats(scn, ()))
    batch = decode_batch(lim, 2, 64, 4096, 512, "reserve")
    assert batch == (8 if kv_fraction < 0.5 else 64)
    pre = prefill_rate_per_s(seen["cost"], prefill_replicas * 2, lim.max_num_tokens, 4096)
    dec = decode_rate_per_s(seen["cost"], (3 - prefill_replicas) * 2, batch, 4096, 512)
    assert seen["rate"] == pytest.approx(0.9 * min(pre, dec), rel=1e-12)
