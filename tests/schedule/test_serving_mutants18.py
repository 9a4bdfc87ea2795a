"""Serving layout choice, the Volta weight format, static batches' busy time and the lane simulator's decode-only
admission and graph counts checked by hand where mutation testing (benchmarks/mutation.py, seed 18) found them
loose."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import SimulationError
from narrowpath.schedule import serving_run
from narrowpath.schedule.serving_choose import choose_layout
from narrowpath.schedule.serving_defaults import resolve_formats
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import Lane, LaneSpec
from narrowpath.schedule.serving_stats import LaneTotals
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.schedule.lanes import bare_lane

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl: str = "llama3-8b", sys_id: str = "dgx-h100"):
    return ServingScenario(system=system(sys_id), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


# ---- the layout choice ----------------------------------------------------------------------------------------

def test_a_candidate_that_cannot_serve_is_skipped_not_the_end_of_the_choice(monkeypatch):
    """Llama-3 8B on 4 GPUs with tp and pp open: the candidates come tp-first, (tp 1, pp 4), (2, 2), (4, 1). A
    stand-in simulator refuses the first (a SimulationError, as a layout whose KV does not fit) and rates the
    others by their tp (2 and 4 tokens/s): the refused candidate is passed over and the rest are still tried, so
    (4, 1) wins; all three are tried."""
    seen = []

    def fake(trial, *a, **kw):
        seen.append((trial.plan.tp, trial.plan.pp))
        if trial.plan.tp == 1:
            raise SimulationError("a request needs more KV blocks than a lane holds")
        return SimpleNamespace(result=SimpleNamespace(output_tokens_per_s=float(trial.plan.tp)))

    monkeypatch.setattr(serving_run, "simulate", fake)
    out = choose_layout(_scn(ServingPlan(tp=1, pp=4)), ("tp", "pp"))
    assert seen == [(1, 4), (2, 2), (4, 1)]
    assert (out.plan.tp, out.plan.pp) == (4, 1)


# ---- what a stack fills in ------------------------------------------------------------------------------------

def test_an_open_weight_format_runs_the_bf16_checkpoint_in_fp16_on_volta():
    """weight_precision left open on a DGX-1 (V100: tensor cores take fp16, not bf16, so the device's 16-bit
    format is fp16): the default stack's checkpoint is bf16 (serving_stacks.yaml), which Volta runs in fp16 —
    the plan gets fp16 and the note says why. On an H100 (bf16 tensor cores) the same knob stays bf16."""
    scn = _scn(ServingPlan(weight_precision="fp16", kv_precision="fp16"), sys_id="dgx-1v")
    assert scn.system.device.half_format == "fp16"
    out = resolve_formats(scn, ("weight_precision",))
    assert out.plan.weight_precision == "fp16"
    assert dict(out.chosen)["weight_precision"].startswith("fp16 — the default stack's bf16 checkpoint, run in fp16")
    assert resolve_formats(_scn(), ("weight_precision",)).plan.weight_precision == "bf16"


# ---- static batches -------------------------------------------------------------------------------------------

def test_static_batches_are_busy_for_the_whole_run():
    """Two static batches of 4 requests of 64 + 5 tokens, all arrived at 0: each batch's context pass and decode
    steps run back to back and the second batch starts when the first ends, so the lane is never idle — its busy
    time is the sum of the 4 logged durations (context, 4 decode steps, twice) and the makespan (last finish − 0),
    not the last record's duration alone."""
    load = Load(arrival="fixed-batch", batch_size=4, input_tokens=64, output_tokens=5, num_requests=8)
    res = simulate(_scn(ServingPlan(), load)).result
    durations = [r.duration_s for r in res.log]
    assert len(durations) == 4 and min(durations) > 0
    assert res.totals.busy_s == pytest.approx(sum(durations), rel=1e-12)
    assert res.totals.busy_s == pytest.approx(res.makespan_s, rel=1e-12)
    assert res.totals.busy_s > 1.5 * max(durations)


# ---- the lane simulator -----------------------------------------------------------------------------------------

def test_a_one_token_request_finishing_on_a_decode_lane_sets_only_its_own_finish():
    """A decode-only lane (the decode side of a disaggregated deployment), iterations of 1 s: request 0 (10 + 3
    tokens, here at 0) decodes its 2 remaining tokens and finishes at 2 s; request 1 (10 + 1 tokens) reaches the
    lane at 5 s with its only token already made by the prefill side, so it finishes on arrival at 5 s. Request
    0's finish stays 2 s, and request 2 (arriving at 9 s, 10 + 2 tokens: one decode step) finishes at 10 s."""
    spec = LaneSpec(4, 64, 100, 16, "decode-only", "reserve", True)
    arr = np.array([0.0, 5.0, 9.0])
    n_in, n_out = np.array([10, 10, 10], dtype=np.int64), np.array([3, 1, 2], dtype=np.int64)
    first, finish = np.full(3, np.nan), np.full(3, np.nan)
    lane = Lane(spec, lambda *a, **kw: 1.0, np.arange(3), arr, n_in, n_out, first, finish, LaneTotals(), None)
    lane.run()
    assert finish.tolist() == [2.0, 5.0, 10.0]


class _GraphPricer:
    """Iterations of 1 s; decode-only iterations of `dec` decodes run at the captured graph `size(dec)`."""

    def __init__(self, size):
        self.size = size

    def __call__(self, T, dec, dctx, pre_tok, pairs, pctx, rows, q, requests=None):
        return 1.0

    def decode_graph(self, dec):
        return self.size(dec)


@pytest.mark.parametrize("size, padded, eager", [(lambda d: 8, 24.0, 0), (lambda d: None, 0.0, 3)])
def test_decode_only_steps_count_at_the_pricers_graph_size(size, padded, eager):
    """Chunked prefill, a 64-token budget, one 100-token prompt of 4 output tokens: 2 prompt iterations, then 3
    decode-only steps of 1 decode. A pricer whose decode_graph puts 1 decode on a graph of 8 makes them 3 graph
    iterations of 8 rows — padded_decodes 3·8 = 24, no eager iterations; one whose decode_graph says None (no
    graph fits) makes them 3 eager iterations of 1 decode each and pads nothing."""
    spec = LaneSpec(4, 64, 100, 16, "decode-first", "reserve", True)
    lane, a = bare_lane(spec, _GraphPricer(size), [100], [4])
    lane.run()
    t = lane.tot
    assert (t.padded_decodes, t.eager_iterations, t.eager_decodes) == (padded, eager, float(eager))
    assert a["finish"].tolist() == [5.0]
