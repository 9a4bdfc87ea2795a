"""Review 51 of disaggregated serving: the steady state's rate window, decode capacity under speculative decoding,
decode lanes held to the token budget, and the hand-off fabric of pools laid out on several domains."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule import serving_steady
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_stats import window_output_tokens_per_s
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _scn(plan: ServingPlan, load: Load, mdl: str = "llama3-8b", sysm: str = "dgx-h100") -> ServingScenario:
    return ServingScenario(system=system(sysm), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_window_output_rate_by_hand():
    """Window [2, 6] s. Request A: first token at 1 s, 9 tokens, finish at 9 s: its 8 later tokens over (1, 9], 4 s
    of 8 inside -> 4 tokens. Request B: first token at 3 s (inside: 1 token), 5 tokens, finish at 5 s: all 4 later
    ones inside -> 5. Request C: one token at 7 s, outside. (4 + 5) / 4 s = 2.25 tokens/s. An empty window: 0."""
    first, finish = np.array([1.0, 3.0, 7.0]), np.array([9.0, 5.0, 7.0])
    out = np.array([9, 5, 1])
    assert window_output_tokens_per_s(first, finish, out, 2.0, 6.0) == pytest.approx(2.25, rel=1e-12)
    assert window_output_tokens_per_s(first, finish, out, 6.0, 6.0) == 0.0


def test_the_disaggregated_steady_rate_is_what_the_deployment_sustains(monkeypatch):
    """Llama-3 8B on H100, tp 1, batch 128, 512 + 1,024 tokens, 1 prefill + 7 decode instances. The steady state
    offers 0.9 · min(68.77 prefill, 65.38 decode) = 58.84 requests/s and samples one decode lane: 192 requests
    arriving over 23.09 s, the last finishing 9.78 s later. Over first arrival -> last finish the lane read
    192 · 1,024 · 7 / 32.87 s = 41,876 tokens/s (5,234 per GPU), 0.71 of what the deployment sustains: fed the same
    stream for 4,000 requests, its middle half of finishes comes at 7,362 tokens/s per GPU (58.84 · 1,024 / 8 =
    7,531 offered). Read over the measured arrivals' span (the load still on) the steady state gives 7,391: within
    5 % of the long run."""
    seen = {}
    real = serving_steady.simulate

    def spy(scn, *a, **kw):
        seen["rate"] = scn.load.rate_per_s
        return real(scn, *a, **kw)

    monkeypatch.setattr(serving_steady, "simulate", spy)
    plan = ServingPlan(tp=1, replicas=8, prefill_replicas=1, max_batch=128)
    st = serving_steady.steady_lane(_scn(plan, Load(input_tokens=512, output_tokens=1024)))
    assert seen["rate"] == pytest.approx(58.84, rel=1e-3)
    load = Load(arrival="poisson", rate_per_s=seen["rate"], input_tokens=512, output_tokens=1024, num_requests=4000)
    res = simulate(_scn(plan, load), log_lane=False).result
    done = np.sort(res.finish_s)
    a, b = done.size // 4, 3 * done.size // 4
    sustained = (b - a) / (done[b] - done[a]) * 1024
    assert st.output_tokens_per_s == pytest.approx(sustained, rel=0.05)
