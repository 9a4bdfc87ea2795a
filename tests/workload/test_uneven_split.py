"""Megatron-Core's uneven pipeline split (num_layers_in_first/last_pipeline_stage): which layers each stage and
chunk holds, when Megatron refuses a split, what it does to a prediction, and the what-if that proposes one."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan, uneven_split_error
from narrowpath.workload.split import balanced_end_layers, stage_layer_ranges


def _counts(ranges):
    return [sum(len(r) for r in st) for st in ranges]


def test_the_last_stage_takes_what_it_is_given_and_the_rest_split_evenly():
    """DeepSeek-V3's 61 layers on 16 stages with 1 on the last: (61 − 1) / 15 = 4 on each other stage, in order."""
    ranges = stage_layer_ranges(61, 16, 1, 0, 1)
    assert _counts(ranges) == [4] * 15 + [1]
    assert [i for st in ranges for r in st for i in r] == list(range(61))
    assert _counts(stage_layer_ranges(32, 2, 1, 30, 2)) == [30, 2]  # no middle stage: the two ends take all


def test_interleaved_chunks_split_each_stage_and_keep_megatrons_layer_order():
    """62 layers, pp 4, vpp 2, 14 first and 12 last: middle stages (62 − 26) / 2 = 18 each; each stage's layers
    split over its 2 chunks (7, 9, 9, 6 per round); chunk j is stage j mod 4, so stage 0 holds layers 0–6 and
    31–37 (Megatron-Core get_transformer_layer_offset: a round of every stage's first chunks, then the second)."""
    ranges = stage_layer_ranges(62, 4, 2, 14, 12)
    assert _counts(ranges) == [14, 18, 18, 12]
    assert ranges[0] == [range(0, 7), range(31, 38)] and ranges[3] == [range(25, 31), range(56, 62)]


@pytest.mark.parametrize("layers,pp,vpp,first,last,words", [
    (61, 16, 1, 0, 2, "must split evenly"),          # 59 over 15 stages
    (62, 4, 2, 13, 13, "do not split into its 2"),   # 13 on the first stage over 2 chunks
    (32, 2, 1, 30, 1, "must split evenly"),          # no middle stage left for the 1 layer over
    (8, 4, 1, 4, 4, "must split evenly"),            # nothing left for the two middle stages
])
def test_splits_megatron_refuses_say_why(layers, pp, vpp, first, last, words):
    assert words in uneven_split_error(layers, pp, vpp, first, last)
    assert uneven_split_error(61, 16, 1, 0, 1) is None


def test_the_plan_refuses_a_stage_split_without_a_pipeline():
    with pytest.raises(SpecError) as exc:
        Plan(last_stage_layers=2)
    assert exc.value.field == "plan.last_stage_layers"
    with pytest.raises(SpecError):
        Plan(pp=2, dp=1, gbs=8, first_stage_layers=-1)


def test_the_balancing_split_by_hand():
    """12 layers on 4 stages, 3 each, a layer taking 1 s and the last stage 3 s more (its output layer): the
    stages take 3, 3, 3, 6. Splits Megatron accepts: 3 first and 1 last leave 8 for 2 middle stages → 3, 4, 4, 1 + 3
    = 4 at most (every other accepted split leaves a stage at 5 or more)."""
    assert balanced_end_layers(12, 4, 1, [3.0, 3.0, 3.0, 6.0], [3, 3, 3, 3]) == (3, 1)
    assert balanced_end_layers(12, 4, 1, [3.0, 3.0, 3.0, 3.0], [3, 3, 3, 3]) is None  # even already


def test_deepseek_v3_runs_at_its_last_stages_pace_until_the_split_relieves_it():
    """The output layer (twice: the main head and the MTP depth's) and the MTP module make DeepSeek-V3's last stage
    the slowest on 16 stages under the automatic split (3 layers there); with 1 layer the stages even out and the
    step is faster; memory, the simulator and predict see the same split."""
    scn = load_scenario("deepseek-v3-h800-2048")
    base = predict(scn)
    assert [s.layers for s in base.stages][-1] == 3
    assert max(range(16), key=lambda i: base.stages[i].total_s) == 15
    split = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, last_stage_layers=1))
    new = predict(split)
    assert [s.layers for s in new.stages] == [4] * 15 + [1]
    assert new.step_time_s < 0.85 * base.step_time_s
    assert simulate(split, steps=1).noise_free_step_time_s == pytest.approx(new.step_time_s, rel=0.03)


def test_analyze_offers_the_balancing_split_as_a_remedy():
    wis = {w.change: w for w in analyze(load_scenario("deepseek-v3-h800-2048")).verdict.what_ifs}
    w = wis["rebalance_pipeline"]
    assert w.scenario.plan.last_stage_layers == 1 and w.gain_s > 0 and "4/4/1 (now 3/3-4/3)" in w.description
    assert "rebalance_pipeline" not in {w.change for w in analyze(load_scenario("llama3-70b-h100-256")).verdict.what_ifs}


def test_cli_flags_and_their_refusal(capsys):
    assert main(["predict", "deepseek-v3-h800-2048", "--last-stage-layers", "1", "--json"]) == 0
    assert '"last_stage_layers": 1' in capsys.readouterr().out
    assert main(["predict", "llama3-8b-h100-8", "--pp", "4", "--last-stage-layers", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("narrowpath: error: plan.last_stage_layers:") and "\n" not in err
