"""Megatron-Core's uneven pipeline split (num_layers_in_first/last_pipeline_stage): which layers each stage and
chunk holds, when Megatron refuses a split, what it does to a prediction, and the what-if that proposes one."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan, uneven_split_error
from narrowpath.workload.split import balanced_end_layers, stage_layer_ranges
from tests.search.scenarios import deepseek_v3_1f1b


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
    assert ranges[0] == (range(0, 7), range(31, 38)) and ranges[3] == (range(25, 31), range(56, 62))


@pytest.mark.parametrize("layers,pp,vpp,first,last,words", [
    (61, 16, 1, 0, 2, "must split evenly"),          # 59 over 15 stages
    (62, 4, 2, 13, 13, "do not split into its 2"),   # 13 on the first stage over 2 chunks
    (32, 2, 1, 30, 1, "must split evenly"),          # no middle stage left for the 1 layer over
    (8, 4, 1, 4, 4, "must split evenly"),            # nothing left for the two middle stages
])
def test_splits_megatron_refuses_say_why(layers, pp, vpp, first, last, words):
    assert words in uneven_split_error(layers, pp, vpp, first, last)[1]
    assert uneven_split_error(61, 16, 1, 0, 1) is None


def test_the_refusal_names_the_knob_at_fault():
    """pp 4 × vpp 2: 15 layers on the last stage (63 − 15 = 48 over the other 3 stages is fine) do not split into 2
    chunks — the last stage's knob is named; 13 on the first stage (and 13 on the last, 36 over 2 middle stages)
    — the first's; a middle stages' shortfall is put on the last stage's knob when it is set."""
    assert uneven_split_error(63, 4, 2, 0, 15) == ("last_stage_layers", "15 layers on the last stage do not split "
                                                  "into its 2 interleaved chunks")
    assert uneven_split_error(62, 4, 2, 13, 13)[0] == "first_stage_layers"
    assert uneven_split_error(62, 4, 2, 14, 13)[0] == "last_stage_layers"  # 35 over 2 middle stages


def test_with_only_the_first_stage_set_the_last_is_a_middle_stage():
    """Megatron-Core: an unset end shares the rest with the middle stages (32 layers, pp 4, 5 first: 27 / 3 = 9)."""
    assert _counts(stage_layer_ranges(32, 4, 1, 5, 0)) == [5, 9, 9, 9]


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


def test_the_balancing_split_leaves_an_end_automatic_when_that_is_as_good():
    """20 layers on 4 stages of 5, the last 2 s heavier (7 s): 2 layers there leave 18 for the other three, 6 each →
    6, 6, 6, 4 — no split does better (22 s of work on 4 stages needs a stage of 6); the first stage then needs no
    count of its own (0), which is tried first and kept on a tie (5 first, 3 last also reaches 6)."""
    assert balanced_end_layers(20, 4, 1, [5.0, 5.0, 5.0, 7.0], [5, 5, 5, 5]) == (0, 2)


def test_deepseek_v3_runs_at_its_last_stages_pace_until_the_split_relieves_it():
    """The output layer (twice: the main head and the MTP depth's) and the MTP module make DeepSeek-V3's last stage
    the slowest on 16 stages under the automatic split (3 layers there) in Megatron's 1F1B; with 1 layer the stages
    even out and the step is faster; memory, the simulator and predict see the same split. DualPipe (the catalog
    scenario, as published) pairs the last stage with the light first one on one rank, so the split gains little
    there."""
    scn = deepseek_v3_1f1b()
    base = predict(scn)
    assert [s.layers for s in base.stages][-1] == 3
    assert max(range(16), key=lambda i: base.stages[i].total_s) == 15
    split = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, last_stage_layers=1))
    new = predict(split)
    assert [s.layers for s in new.stages] == [4] * 15 + [1]
    assert new.step_time_s < 0.85 * base.step_time_s
    assert simulate(split, steps=1).noise_free_step_time_s == pytest.approx(new.step_time_s, rel=0.005)
    mem_old = [m.total_bytes for m in base.memory_by_stage]
    mem_new = [m.total_bytes for m in new.memory_by_stage]
    assert mem_new[-1] < mem_old[-1] and mem_new[0] > mem_old[0]  # 3 → 1 layer on the last stage, 3 → 4 on the first


def test_analyze_offers_the_balancing_split_as_a_remedy():
    wis = {w.change: w for w in analyze(deepseek_v3_1f1b()).verdict.what_ifs}
    w = wis["rebalance_pipeline"]
    assert w.scenario.plan.last_stage_layers == 1 and w.gain_s > 0 and "4/4/1 (now 3/3-4/3)" in w.description
    dual = {w.change: w for w in analyze(load_scenario("deepseek-v3-h800-2048")).verdict.what_ifs}
    # DualPipe already pairs the heavy last stage with the light first one: a small part of what the split gains
    # under 1F1B (2.4 % against 25 %: with the FP8 exchange less of the step is the expert all-to-all, so the
    # split's compute shows), and the 4-layer first stage no longer fits beside the last stage's output layer
    assert 0 < dual["rebalance_pipeline"].gain_fraction < 0.25 * w.gain_fraction
    assert dual["rebalance_pipeline"].status == "does not fit"
    assert "rebalance_pipeline" not in {w.change for w in analyze(load_scenario("llama3-70b-h100-256")).verdict.what_ifs}


def test_cli_flags_and_their_refusal(capsys):
    assert main(["predict", "deepseek-v3-h800-2048", "--pipeline-schedule", "auto", "--last-stage-layers", "1", "--json"]) == 0
    assert '"last_stage_layers": 1' in capsys.readouterr().out
    assert main(["predict", "llama3-8b-h100-8", "--pp", "4", "--last-stage-layers", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("narrowpath: error: plan.last_stage_layers:") and "\n" not in err
    assert main(["predict", "llama3-8b-h100-8", "--pp", "4", "--vpp", "2", "--first-stage-layers", "14",
                 "--last-stage-layers", "13"]) == 2
    assert capsys.readouterr().err.startswith("narrowpath: error: plan.last_stage_layers:")


def test_a_new_pipeline_or_model_from_the_command_line_splits_automatically(tmp_path, capsys):
    """A scenario's split belongs to its pipeline and model: --pp, --vpp or --model on top of it reset it (unless
    given again); a search keeps the automatic split for every plan and says so."""
    import yaml
    from narrowpath.cli.common import scenario_from_args
    from narrowpath.cli.main import build_parser
    path = tmp_path / "s.yaml"
    data = {"model": "llama3-8b", "system": "dgx-h100", "num_gpus": 8,
            "plan": {"tp": 1, "pp": 4, "dp": 2, "mbs": 1, "gbs": 16, "last_stage_layers": 5}}
    path.write_text(yaml.safe_dump(data))
    parse = build_parser().parse_args
    assert scenario_from_args(parse(["predict", str(path)])).plan.last_stage_layers == 5
    assert scenario_from_args(parse(["predict", str(path), "--pp", "2"])).plan.last_stage_layers == 0
    assert scenario_from_args(parse(["predict", str(path), "--model", "llama3-70b"])).plan.last_stage_layers == 0
    assert scenario_from_args(parse(["predict", str(path), "--pp", "2", "--last-stage-layers", "8"])) \
        .plan.last_stage_layers == 8
    assert main(["search", str(path), "--space", "basic", "--top", "1"]) == 0
    assert "not searched" in capsys.readouterr().err


def test_a_repaired_what_if_that_changes_the_pipeline_drops_the_split():
    """analysis.repair: halving pp on DeepSeek-V3 with 1 layer on the last stage re-splits automatically and says
    so (without it, 61 − 1 layers do not split over 7 stages and the what-if was refused)."""
    from narrowpath.analysis.repair import repaired
    scn = deepseek_v3_1f1b()
    split = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, last_stage_layers=1))
    new, notes = repaired(split, pp=8)
    assert new.plan.last_stage_layers == 0 and "uneven stage split -> automatic" in notes
    kept, _ = repaired(split, pp=8, last_stage_layers=5)  # asked for: kept (56 layers over 7 stages, 8 each)
    assert kept.plan.last_stage_layers == 5


@settings(max_examples=300, deadline=None)
@given(layers=st.integers(1, 130), pp=st.integers(2, 16), vpp=st.integers(1, 4), first=st.integers(0, 40),
       last=st.integers(0, 40))
def test_every_accepted_split_places_each_layer_once_in_order(layers, pp, vpp, first, last):
    """Any split Megatron accepts holds every layer exactly once, in order along the chunks (chunk j on stage
    j mod pp), the ends' counts as given, the other stages equal, each stage's chunks equal."""
    if not (first or last) or uneven_split_error(layers, pp, vpp, first, last):
        return
    ranges = stage_layer_ranges(layers, pp, vpp, first, last)
    chunks = [None] * (pp * vpp)
    for i, stage in enumerate(ranges):
        assert len(stage) == vpp
        for c, r in enumerate(stage):
            chunks[c * pp + i] = r
    assert [i for r in chunks for i in r] == list(range(layers))
    counts = _counts(ranges)
    assert (not first or counts[0] == first) and (not last or counts[-1] == last)
    middle = counts[(1 if first else 0):(pp - 1 if last else pp)]
    assert len(set(middle)) <= 1
    assert all(len(r) == counts[i] // vpp for i, stage in enumerate(ranges) for r in stage)


MB_DSV3_H100_LAYOUT = (1,) + (2,) * 30 + (0,)
"""Megatron-Bridge's DeepSeek-V3 H100 recipe, layout "Et|(tt|)*30mL" on pp 8 × vpp 4: the embedding and 1 layer, 30
chunks of 2, the MTP module and the loss in a chunk of their own (scripts/performance/configs/deepseek/
deepseek_llm_pretrain.py)."""


def test_a_per_chunk_layout_is_taken_as_given():
    """Stage i holds chunks i, i + 8, i + 16, i + 24: stage 0 1 + 2 + 2 + 2 = 7 layers, stage 7 2 + 2 + 2 + 0 = 6;
    the last chunk is empty and the layers stay in order."""
    ranges = stage_layer_ranges(61, 8, 4, chunk_layers=MB_DSV3_H100_LAYOUT)
    assert _counts(ranges) == [7, 8, 8, 8, 8, 8, 8, 6]
    assert ranges[7][3] == range(61, 61) and ranges[0][0] == range(0, 1)
    assert [i for c in range(4) for st in ranges for i in st[c]] == list(range(61))


@pytest.mark.parametrize("kw,words", [
    ({"chunk_layers": (4, 4, 4)}, "pp·vpp = 4·1 = 4 are needed"),
    ({"chunk_layers": (4, 0, 4, 4)}, "leaves pipeline stage 1 without a layer"),
    ({"chunk_layers": (4, 4, 4, 4), "last_stage_layers": 4}, "leave first_stage_layers and last_stage_layers"),
    ({"chunk_layers": "4,4,4,4"}, "must list the layers of every pipeline chunk"),
])
def test_a_per_chunk_layout_megatron_cannot_run_is_refused(kw, words):
    with pytest.raises(SpecError) as exc:
        Plan(pp=4, dp=1, gbs=16, **kw)
    assert exc.value.field == "plan.chunk_layers" and words in str(exc.value)


def test_the_same_split_given_per_chunk_or_by_its_last_stage_prices_the_same():
    """DeepSeek-V3 on 16 stages: 15 × 4 and 1 per chunk is `last_stage_layers: 1`; a layout that does not add up
    to the model's 61 layers is refused in one line naming plan.chunk_layers."""
    scn = deepseek_v3_1f1b()
    by_last = predict(dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, last_stage_layers=1)))
    by_chunk = predict(dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, chunk_layers=(4,) * 15 + (1,))))
    assert by_chunk.step_time_s == by_last.step_time_s
    assert by_chunk.memory.total_bytes == by_last.memory.total_bytes
    with pytest.raises(SpecError) as exc:
        dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, chunk_layers=(4,) * 16))
    assert exc.value.field == "plan.chunk_layers" and "holds 64 layers in all" in str(exc.value)


def test_a_chunk_without_layers_runs_through_predict_and_the_simulator():
    """The H100 recipe's layout on 2,048 H800 (pp 8, vpp 4): the loss chunk holds no layer. Predict and the simulator
    price it (interleaved schedules differ by up to 12 %: tests/schedule/sim/test_consistency.py); balancing takes
    load off the stage with the output layer, so the step is faster than under the automatic split."""
    scn = deepseek_v3_1f1b()
    plan = dataclasses.replace(scn.plan, pp=8, vpp=4, dp=256, gbs=16384)
    auto = predict(dataclasses.replace(scn, plan=plan))
    laid = dataclasses.replace(scn, plan=dataclasses.replace(plan, chunk_layers=MB_DSV3_H100_LAYOUT))
    new = predict(laid)
    assert [s.layers for s in new.stages] == [7, 8, 8, 8, 8, 8, 8, 6]
    assert new.step_time_s < auto.step_time_s
    assert simulate(laid, steps=1).noise_free_step_time_s == pytest.approx(new.step_time_s, rel=0.12)


def test_cli_chunk_layers(capsys):
    assert main(["predict", "deepseek-v3-h800-2048", "--pipeline-schedule", "auto", "--chunk-layers", ",".join(["4"] * 15 + ["1"]), "--json"]) == 0
    assert '"chunk_layers": [' in capsys.readouterr().out
    assert main(["predict", "deepseek-v3-h800-2048", "--pipeline-schedule", "auto", "--chunk-layers", "4,x"]) == 2
    assert capsys.readouterr().err.strip() == ("narrowpath: error: --chunk-layers: must list whole numbers separated "
                                               "by commas, got '4,x'")
    from narrowpath.analysis.repair import repaired
    scn = deepseek_v3_1f1b()
    laid = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, chunk_layers=(4,) * 15 + (1,)))
    new, notes = repaired(laid, pp=8)
    assert new.plan.chunk_layers == () and "uneven stage split -> automatic" in notes


def test_megatron_bridge_style_chunk_layouts_by_hand():
    """61 layers on pp 8 × vpp 4 (32 chunks): c = 2 in each of the 30 middle chunks leaves 1 for the two ends —
    (0, 2…, 1) and (1, 2…, 0), the H100 recipe's layout; c = 1 would leave 31 for the ends, more than c in the last."""
    from narrowpath.workload.split import end_chunk_layouts
    assert end_chunk_layouts(61, 8, 4) == [(0,) + (2,) * 30 + (1,), MB_DSV3_H100_LAYOUT]
    assert end_chunk_layouts(8, 2, 1) == []  # two chunks: no middle one to lay out around
    # 10 layers on pp 2 × vpp 2: c = 1, 2 leave 8, 6 for the ends (more than a, b ≤ c allow); c = 3 leaves 4
    # (a, b) = (1, 3), (2, 2), (3, 1); c = 4 leaves 2: (0, 2), (1, 1), (2, 0); c = 5 leaves 0
    assert end_chunk_layouts(10, 2, 2) == [(1, 3, 3, 3), (2, 3, 3, 2), (3, 3, 3, 1), (0, 4, 4, 2), (1, 4, 4, 1),
                                          (2, 4, 4, 0), (0, 5, 5, 0)]


def test_analyze_offers_a_chunk_layout_for_an_interleaved_pipeline():
    """DeepSeek-V3 on 2,048 H800 at pp 8 × vpp 4: the layout priced fastest is the recipe's, the output layer's chunk
    without a layer, ~2 s faster than the automatic split — and it fits 80 GB (81.5 of 85.9 GB, the combine keeping no
    expert outputs: plan.moe_probs) where the automatic split does not (86.9 GB: its stage 0 holds 16 forwards of
    each two-layer chunk and none of its one-layer last chunk at its peak, cost.memory.chunk_held_counts)."""
    scn = deepseek_v3_1f1b()
    plan = dataclasses.replace(scn.plan, pp=8, vpp=4, dp=256, gbs=16384)
    wis = {w.change: w for w in analyze(dataclasses.replace(scn, plan=plan)).verdict.what_ifs}
    w = wis["rebalance_chunks"]
    assert w.scenario.plan.chunk_layers == MB_DSV3_H100_LAYOUT and w.gain_s > 1.0
    assert w.status == "faster" and predict(w.scenario).memory.fits
    assert not predict(dataclasses.replace(scn, plan=plan)).memory.fits



def test_search_says_what_rebalancing_the_best_plan_would_give(capsys):
    """The search keeps the automatic split; for its first plan it prices the split analyze would propose and
    reports it when faster and fitting: DeepSeek-V3 pinned to pp 16 — 1 layer on the last stage, ~25 % faster (JSON
    `best_rebalanced`, a console line)."""
    import json
    args = ["search", "deepseek-v3-h800-2048", "--pipeline-schedule", "auto", "--space", "basic", "--pp", "16", "--top", "1"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rb = out["best_rebalanced"]
    assert (rb["last_stage_layers"], rb["chunk_layers"], rb["fits"]) == (1, [], True)
    assert rb["step_time_s"] < 0.8 * out["best"][0]["step_time_s"]
    assert main(args) == 0
    assert "pipeline stages rebalanced (last_stage_layers 1" in capsys.readouterr().out
    assert main(["search", "llama3-8b-h100-8", "--space", "basic", "--top", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best_rebalanced"] is None  # one stage: nothing to balance


def test_the_automatic_split_is_priced_as_the_plan_runs_it():
    """(0, 0) is the plan's automatic split, which a stack may lay out itself (workload.split.stack_chunk_layers):
    12 layers at 1 s each on 4 stages laid out 4, 4, 3, 1 run at 4 s a micro-batch; 3 on the last stage leave 9 for
    the other three (Megatron-Core's uneven split: 3 each), 3 s. Priced as the even split, (0, 0) would look as good
    (3, 3, 3, 3) and, tried first, win: no rebalancing would be proposed for a plan that needs it."""
    laid_out = [4.0, 4.0, 3.0, 1.0]
    assert balanced_end_layers(12, 4, 1, laid_out, [4, 4, 3, 1], auto_counts=[4, 4, 3, 1]) == (0, 3)
    assert balanced_end_layers(12, 4, 1, laid_out, [4, 4, 3, 1]) == (0, 0)  # the even split's price, not the plan's
