"""Values the thirty-first session's mutants of the chunk shares (benchmarks/mutation.py --ids over the changed
lines) found unguarded: the exposed shares' walk past a row of another phase, DualPipeV's two ends, the default of
a forward's exposed traffic, and the embedding's chunk in the parameter shares — each pinned by a hand value."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.schedule.chunks import chunk_param_shares, exposed_shares
from narrowpath.schedule.step import StageTimes, predict


class _Tr:
    def __init__(self, phase):
        self.phase, self.axis = phase, "dp"


class _Cost:
    time_s = 2.0


def test_a_row_of_another_phase_is_skipped_not_the_end_of_the_rows():
    """A once-per-step row (phase `step`) first, then a forward row of 2 s with 0.5 s exposed and a backward row of
    2 × 2 s with 1 s exposed: (0.25, 0.25) — the step row counts for neither pass and the walk goes on past it."""
    rows = [(_Tr("step"), 1.0, _Cost, 2.0), (_Tr("fwd"), 1.0, _Cost, 0.5), (_Tr("bwd"), 2.0, _Cost, 1.0)]
    assert exposed_shares(rows) == (0.25, 0.25)


def test_dualpipev_puts_the_embedding_in_rank_0s_first_arm_and_the_output_layer_in_its_second():
    """On a V rank 0 holds both ends (virtual stages 0 and 2·pp − 1): the embedding end's items (the lookup, no
    logits) are chunk 0's, the output end's (logits, loss, no lookup) chunk 1's."""
    s = load_scenario("llama3-70b-h100-256")
    scn = dataclasses.replace(s, plan=dataclasses.replace(s.plan, pp=4, vpp=2, pipeline_schedule="dualpipev"))
    first, last = predict(scn).workload.end_work
    names = [{op.name.split(".")[0] for op, _ in end[0]} for end in (first, last)]
    assert "embedding_lookup" in names[0] and "logits" not in names[0]
    assert "logits" in names[1] and "embedding_lookup" not in names[1]


def test_a_stage_built_without_its_forward_exposure_passes_its_forward_compute():
    """StageTimes' forward pass is its compute plus the traffic it exposes, none unless given: 1 s."""
    assert StageTimes(0, 1, 1.0, 2.0, {"tp": 0.5}, 0.0).fwd_s == 1.0
    assert StageTimes(0, 1, 1.0, 2.0, {"tp": 0.5}, 0.0, 0.25).fwd_s == 1.25


def test_the_embedding_table_sits_in_the_first_stages_first_chunk():
    """Llama-3 70B on pp 4 × vpp 5 (4 layers a chunk, one layer kind): a middle stage's chunks hold a fifth of its
    parameters each; stage 0's first chunk adds the vocab × hidden / tp embedding table, so it holds more than the
    others, which stay equal; the last stage's last chunk adds the output layer."""
    s = load_scenario("llama3-70b-h100-256")
    scn = dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=4, pp=4, vpp=5, cp=2, dp=8))
    from narrowpath.workload.split import plan_layer_ranges
    ranges = plan_layer_ranges(scn.model, scn.plan)
    mid = chunk_param_shares(scn, 1, ranges[1])
    assert mid == pytest.approx([0.2] * 5, rel=1e-12)
    first = chunk_param_shares(scn, 0, ranges[0])
    assert first[0] > first[1] and first[1:] == pytest.approx([first[1]] * 4, rel=1e-12)
    last = chunk_param_shares(scn, 3, ranges[3])
    assert last[-1] > last[0] and last[:-1] == pytest.approx([last[0]] * 4, rel=1e-12)
