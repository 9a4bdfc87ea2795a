"""Serving values the seed-21 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: the
interpolation below the token grid's first point, TensorRT-LLM's batch table boundary, the grid of a small
ServingCost, the note on a static batch's KV fraction and the draft time of an iteration without decodes — each
pinned by a hand value."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_cost import ServingCost, _interp
from narrowpath.schedule.serving_defaults import resolve_limits, trtllm_runtime_batch
from narrowpath.schedule.serving_run import step_pricer
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

H100 = system("dgx-h100")


def _scn(plan: ServingPlan = ServingPlan(), load: Load | None = None) -> ServingScenario:
    load = load or Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)
    return ServingScenario(system=H100, model=model("llama3-8b"), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_interp_extends_the_first_segment_below_the_grid():
    """On g = 1, 2, 3 with y = 10, 20, 40 the first segment is y = 10·x, extended below 1: 5 at x = 0.5, 10 at 1;
    between points linear (30 at 2.5), beyond the end the last segment (y = 20·x − 20: 60 at 4); 0 at x ≤ 0."""
    g, y = [1.0, 2.0, 3.0], [10.0, 20.0, 40.0]
    assert _interp(0.5, g, y) == pytest.approx(5.0)
    assert _interp(1.0, g, y) == pytest.approx(10.0)
    assert _interp(2.5, g, y) == pytest.approx(30.0)
    assert _interp(4.0, g, y) == pytest.approx(60.0)
    assert _interp(0.0, g, y) == 0.0


def test_runtime_batch_table_entry_is_for_capacities_strictly_below_its_limit():
    """kDefaultBatchSizeTable's (336, 256): a capacity below 336 runs at 256; 336 itself is the next entry's
    (below 672: 512)."""
    assert trtllm_runtime_batch(335) == 256
    assert trtllm_runtime_batch(336) == 512


def test_a_small_serving_cost_prices_every_count_to_eight_and_no_further():
    """token_grid: every count to 8, then steps of 25 % up to max_tokens; a cost built for at most 8 (or fewer)
    tokens is priced at 1..8 only."""
    for n in (4, 8):
        assert ServingCost(_scn(), n).grid.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_a_static_batch_notes_why_its_kv_fraction_is_whole():
    """A fixed-batch load is served as a static batch; in a static session (TensorRT-LLM 0.x's GptSession) its KV
    cache is allocated whole (kv_memory_fraction 1), and the note says why. An engine without static sessions (vLLM,
    the tool's default) keeps its own fraction for the same load."""
    load = Load(arrival="fixed-batch", input_tokens=128, output_tokens=16, batch_size=8)
    out, _ = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 0.7"), load))
    notes = dict(out.chosen)
    assert notes["kv_memory_fraction"] == ("1.0 — a static batch's KV cache is allocated whole, not as a share of "
                                           "the free memory (TensorRT-LLM 0.x GptSession)")
    stated, _ = resolve_limits(_scn(ServingPlan(framework="TensorRT-LLM 0.7", policy="static"), load))
    assert stated.plan.kv_memory_fraction == 1.0  # a stated static policy, not only a filled one
    for framework in ("", "vLLM 0.10", "vLLM 0.5.3"):
        out, _ = resolve_limits(_scn(ServingPlan(framework=framework), load))
        assert out.plan.policy == "static" and out.plan.kv_memory_fraction == 0.9
        assert "GptSession" not in dict(out.chosen)["kv_memory_fraction"]


def test_an_iteration_without_decodes_runs_no_draft_passes():
    """Speculative decoding drafts only for the decodes of an iteration: with k = 3 draft tokens but no decodes
    (a prompt-only iteration) the draft time is 0; with decodes but k = 0 also 0."""
    cost = ServingCost(_scn(), 64)
    assert step_pricer(cost, 1, 3).draft_s(0, 0) == 0.0
    assert step_pricer(cost, 1, 3).draft_s(0, 64) == 0.0
    assert step_pricer(cost, 1, 0).draft_s(8, 0) == 0.0
    assert step_pricer(cost, 1, 3).draft_s(8, 0) > 0.0


# ---- lanes driven by hand -------------------------------------------------------------------------------------

def _one_second(*args, **kw):
    return 1.0


def _half_second(*args, **kw):
    return 0.5


def test_speculative_decode_steps_count_every_verified_token():
    """One 10-token prompt of 5 output tokens, 2 draft tokens (q = 3) at gain 1: the prompt iteration yields the
    first token, then 4 decode-only steps each run 1 · 3 tokens through the target model: 12 decode tokens."""
    from narrowpath.schedule.serving_sim import LaneSpec
    from tests.schedule.lanes import bare_lane
    lane, a = bare_lane(LaneSpec(4, 256, 100, 16, "decode-first", "reserve", True, spec_tokens=2, spec_gain=1.0),
                        _one_second, [10], [5])
    lane.run()
    assert (lane.tot.decode_tokens, lane.tot.prompt_tokens, lane.tot.iterations) == (12.0, 10.0, 5)
    assert a["finish"].tolist() == [5.0]


def test_a_request_finished_by_its_prompt_gives_every_block_back():
    """A 10-token prompt with 1 output token ends with its prompt iteration (1 block of 16 tokens); the lane's 100
    blocks are all free again afterwards."""
    from narrowpath.schedule.serving_sim import LaneSpec
    from tests.schedule.lanes import bare_lane
    lane, a = bare_lane(LaneSpec(4, 256, 100, 16, "decode-first", "reserve", True), _one_second, [10], [1])
    lane.run()
    assert a["finish"].tolist() == [1.0]
    assert lane.free == 100


def test_a_decode_run_stops_at_the_step_that_sees_the_next_arrival():
    """Steps of 0.5 s. Request 0 (10 + 20 tokens) arrives at 0, request 1 (10 + 2) at 3.0 s: the prompt
    iteration 0-0.5 s, then one merged run of (3.0 − 0.5)/0.5 = 5 decode steps to 3.0 s, the mixed iteration
    admitting request 1's prompt, one step of both decodes (request 1's last), and request 0's remaining
    19 − 5 − 1 − 1 = 12 steps in one run."""
    import numpy as np

    from narrowpath.schedule.serving_sim import Lane, LaneSpec
    from narrowpath.schedule.serving_stats import LaneTotals
    log: list = []
    lane = Lane(LaneSpec(4, 256, 100, 16, "decode-first", "reserve", True), _half_second, np.arange(2),
                np.array([0.0, 3.0]), np.array([10, 10]), np.array([20, 2]), np.full(2, np.nan), np.full(2, np.nan),
                LaneTotals(), log)
    lane.run()
    assert [(r.start_s, r.steps, r.decodes, r.prompt_tokens) for r in log] == [
        (0.0, 1, 0, 10), (0.5, 5, 1, 0), (3.0, 1, 1, 10), (3.5, 1, 2, 0), (4.0, 12, 1, 0)]


class _FixedCost:
    """What _static reads of a ServingCost: the plan's pp, 1-s iterations, no captured graphs."""

    class scn:  # noqa: N801
        class plan:  # noqa: N801
            pp = 1

    @staticmethod
    def iteration_s(*args):
        return 1.0

    @staticmethod
    def decode_graph(dec):
        return None


def test_a_static_batch_that_needs_exactly_the_lanes_blocks_runs():
    """Two requests of 10 + 6 tokens in 16-token blocks need 1 block each: 2 blocks, exactly what the lane holds,
    so the batch runs (prompt iteration to 1 s, 5 decode steps to 6 s) rather than being refused."""
    import numpy as np
    from types import SimpleNamespace as NS

    from narrowpath.schedule.serving_run import _static
    from narrowpath.schedule.serving_stats import LaneTotals
    lim = NS(max_batch=2, memory=NS(kv_blocks=2, footprint=lambda tokens: tokens), block_tokens=16)  # no window
    first, finish, tot = np.full(2, np.nan), np.full(2, np.nan), LaneTotals()
    _static(_FixedCost(), lim, np.arange(2), np.zeros(2), np.array([10, 10]), np.array([6, 6]), first, finish, tot,
            None)
    assert first.tolist() == [1.0, 1.0] and finish.tolist() == [6.0, 6.0]


def test_the_layout_chooser_prices_candidates_with_the_runs_calibration():
    """Llama-3 8B on two H100 with tp and pp unpublished: under the shipped calibration tensor parallelism serves
    faster (tp 2); under a calibration whose NVLink runs at 0.1 % of its bandwidth with 2 ms per message, the
    per-token all-reduces lose to a two-stage pipeline (pp 2) — so the choice must be priced with the calibration
    the run is given, not the device's default."""
    import dataclasses

    from narrowpath.catalog import calibration_for
    from narrowpath.schedule.serving_run import simulate
    from narrowpath.spec.calibration import TierCalibration
    scn = ServingScenario(system=H100, model=model("llama3-8b"), plan=ServingPlan(tp=2, pp=1),
                          load=Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=64),
                          num_gpus=2)
    cal = calibration_for(H100.device.name)
    slow = dataclasses.replace(cal, tiers={**cal.tiers, "scale_up": TierCalibration(bw_efficiency=0.001,
                                                                                    alpha_s=2e-3)})
    assert simulate(scn, ("tp", "pp"), None, log_lane=False).scenario.plan.tp == 2
    chosen = simulate(scn, ("tp", "pp"), slow, log_lane=False).scenario.plan
    assert (chosen.tp, chosen.pp) == (1, 2)
