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
    """A fixed-batch load is served as a static batch whose KV cache is allocated whole (kv_memory_fraction 1),
    and the note says why, naming TensorRT-LLM 0.x's GptSession."""
    scn = _scn(load=Load(arrival="fixed-batch", input_tokens=128, output_tokens=16, batch_size=8))
    out, _ = resolve_limits(scn)
    notes = dict(out.chosen)
    assert notes["kv_memory_fraction"] == ("1.0 — a static batch's KV cache is allocated whole, not as a share of "
                                           "the free memory (TensorRT-LLM 0.x GptSession)")


def test_an_iteration_without_decodes_runs_no_draft_passes():
    """Speculative decoding drafts only for the decodes of an iteration: with k = 3 draft tokens but no decodes
    (a prompt-only iteration) the draft time is 0; with decodes but k = 0 also 0."""
    cost = ServingCost(_scn(), 64)
    assert step_pricer(cost, 1, 3).draft_s(0, 0) == 0.0
    assert step_pricer(cost, 1, 3).draft_s(0, 64) == 0.0
    assert step_pricer(cost, 1, 0).draft_s(8, 0) == 0.0
    assert step_pricer(cost, 1, 3).draft_s(8, 0) > 0.0
