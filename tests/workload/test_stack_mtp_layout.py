"""A multi-token-prediction model on a Megatron-Bridge pipeline whose chunks do not divide its layers is split as the
stack's DeepSeek-V3 recipe splits it (catalog/stacks.yaml `mtp_layout`; workload.split.stack_chunk_layers):
Megatron-Core has no automatic split for 61 layers on 16 stages, and Megatron-Bridge's recipe
(recipes/deepseek/deepseek_v3.py set_deepseek_v3_pipeline_model_parallel_layout) fills the chunks from the first and
leaves the last one layer beside the MTP block and the loss. Under the tool's own automatic split that last stage
would hold 3 layers, a second output head and the MTP block, and pace the whole pipeline."""
from __future__ import annotations

import pytest
import yaml

from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.cli.main import main
from narrowpath.schedule.step import predict
from narrowpath.workload.split import mtp_front_filled, plan_layer_ranges, stack_chunk_layers, stack_layout

MB = "Megatron-Bridge / NeMo 25.11 container (MXFP8)"

# the recipe's layout_map for DeepSeek-V3's 61 layers, written out from its lists (decoder layers per chunk)
RECIPE_MAP = {
    (4, 1): (16, 16, 16, 13),
    (8, 1): (8,) * 7 + (5,),
    (4, 2): (8,) * 7 + (5,),
    (16, 1): (4,) * 15 + (1,),
    (8, 2): (4,) * 15 + (1,),
    (4, 4): (4,) * 15 + (1,),
}


@pytest.mark.parametrize("pp_vpp", sorted(RECIPE_MAP))
def test_the_rule_reproduces_every_entry_of_the_recipes_map(pp_vpp):
    assert mtp_front_filled(61, *pp_vpp) == RECIPE_MAP[pp_vpp]


def test_even_chunks_and_a_stage_left_empty_are_not_laid_out():
    assert mtp_front_filled(64, 16, 1) == ()  # 4 each: Megatron-Core's even split
    assert mtp_front_filled(61, 32, 1) == ()  # 2 each would leave the 32nd stage no layer
    assert mtp_front_filled(61, 8, 4)[-2:] == (1, 0)  # a chunk may hold none while its stage holds others
    assert mtp_front_filled(10, 4, 1) == (3, 3, 3, 1)
    # chunk j sits on stage j mod pp: stages 0-3 hold chunks 0-3 (one layer each) and 4-7 (the fifth layer, then
    # none), so every stage holds a layer; stage-major counting would see stages 2 and 3 empty
    assert mtp_front_filled(5, 4, 2) == (1, 1, 1, 1, 1, 0, 0, 0)
    assert mtp_front_filled(3, 2, 2) == (1, 1, 1, 0)


def _case(**plan_changes):
    plan = {"tp": 1, "pp": 16, "dp": 16, "cp": 1, "ep": 8, "vpp": 1, "mbs": 1, "gbs": 2048, "zero_stage": 1,
            "recompute": "none", "precision": "mxfp8", "framework": MB, **plan_changes}
    return {"id": "dsv3", "model": "deepseek-v3", "system": "dgx-b200", "num_gpus": 256, "plan": plan}


def test_a_megatron_bridge_run_takes_the_layout_and_says_so():
    scn = scenario_from_dict(_case())
    assert scn.plan.chunk_layers == ()  # the knob stays automatic: the stack's rule is what automatic means here
    pred = predict(scn)
    assert [s.layers for s in pred.stages] == [4] * 15 + [1]
    note = [a for a in pred.assumptions if a.startswith("pipeline split:")]
    assert len(note) == 1 and "megatron-bridge" in note[0] and "4 layers" in note[0] and "1 in the last" in note[0]
    # the stage with the MTP block, the two output heads and the losses now takes about what a 4-layer stage does
    assert pred.stages[-1].total_s == pytest.approx(pred.stages[1].total_s, rel=0.1)


def test_the_layout_is_faster_than_the_even_split_it_replaces():
    """The tool's automatic split (3 layers on the first and the last two stages, 4 elsewhere) leaves the MTP block
    on a 3-layer last stage, ~1.5x a middle stage's micro-batch: the step runs at that stage's pace."""
    laid_out = predict(scenario_from_dict(_case()))
    even = predict(scenario_from_dict(_case(chunk_layers=[3] + [4] * 13 + [3, 3])))
    assert even.stages[-1].total_s > 1.3 * even.stages[1].total_s
    assert laid_out.step_time_s < 0.8 * even.step_time_s
    assert not [a for a in even.assumptions if a.startswith("pipeline split:")]


@pytest.mark.parametrize("change", [
    {"first_stage_layers": 1},                                  # a stated split stays
    {"chunk_layers": [3] + [4] * 13 + [3, 3]},
    {"framework": "NeMo 25.07"},                                # another stack
    {"framework": ""},                                          # no stack
    {"pipeline_schedule": "dualpipe"},                          # DualPipe pairs stages i and p - 1 - i itself
    {"pp": 8, "vpp": 4, "dp": 32},                              # a shape the recipe's map does not list
    {"pp": 2, "dp": 128},
])
def test_stated_splits_other_stacks_and_dualpipe_keep_their_own(change):
    scn = scenario_from_dict(_case(**change))
    assert stack_chunk_layers(scn.model, scn.plan) == ()
    counts = [sum(len(r) for r in st) for st in plan_layer_ranges(scn.model, scn.plan)]
    assert counts != [4] * 15 + [1]


MLA = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}


@pytest.mark.parametrize("fields", [
    {"attention": "mla", **MLA},                       # DeepSeek-V3's shape without multi-token prediction
    {"mtp_layers": 1},                                 # MTP without MLA: another family (GLM-4.5's recipe sets none)
])
def test_outside_the_deepseek_v3_family_the_split_stays_automatic(fields):
    data = _case()
    data["model"] = {"name": "other", "layers": 61, "hidden": 7168, "heads": 128, "ffn": 18432, "vocab": 129280,
                     "seq_len": 4096, "experts": 256, "top_k": 8, **fields}
    scn = scenario_from_dict(data)
    assert stack_chunk_layers(scn.model, scn.plan) == ()
    assert [sum(len(r) for r in st) for st in plan_layer_ranges(scn.model, scn.plan)] == [3] + [4] * 13 + [3, 3]


def test_an_interleaved_pipeline_is_laid_out_chunk_by_chunk():
    """pp 4 x vpp 4: 15 chunks of 4 and the last of 1; chunk j on stage j mod 4, so stage 3 holds 4 + 4 + 4 + 1.
    The simulator plays the same chunks (its interleaved program reads each chunk's own work)."""
    pred = predict(scenario_from_dict(_case(pp=4, vpp=4, dp=64, gbs=2048)))
    assert [s.layers for s in pred.stages] == [16, 16, 16, 13]
    assert any(a.startswith("pipeline split:") for a in pred.assumptions)


@pytest.mark.parametrize("pp,vpp,dp", [(8, 2, 32), (4, 4, 64)])
def test_the_simulator_plays_the_stacks_layout(pp, vpp, dp):
    """The simulator under the stack's layout plays exactly what it plays with that layout stated (ignoring it
    would play the even split: 10.2 -> 11.3 s at pp 8 x vpp 2)."""
    from narrowpath.schedule.sim import simulate
    laid = simulate(scenario_from_dict(_case(pp=pp, vpp=vpp, dp=dp)), steps=1).noise_free_step_time_s
    stated = simulate(scenario_from_dict(_case(pp=pp, vpp=vpp, dp=dp, chunk_layers=list(RECIPE_MAP[(pp, vpp)]))),
                      steps=1).noise_free_step_time_s
    even = simulate(scenario_from_dict(_case(pp=pp, vpp=vpp, dp=dp, framework="")), steps=1).noise_free_step_time_s
    assert laid == stated and abs(even / laid - 1) > 0.01


@pytest.mark.parametrize("pp_vpp", sorted(RECIPE_MAP))
def test_the_stack_lays_out_exactly_the_maps_shapes(pp_vpp):
    scn = scenario_from_dict(_case())
    assert stack_layout(scn.model, MB, *pp_vpp) == RECIPE_MAP[pp_vpp]
    assert stack_layout(scn.model, "Megatron-LM core_r0.14", *pp_vpp) == ()


def test_only_the_recipes_depth_is_laid_out():
    """The map's layouts hold 61 decoder layers (Megatron-Core asserts the count): a 33-layer model of the same
    family on a listed shape keeps the automatic split."""
    data = _case()
    data["model"] = {"name": "short-dsv3", "layers": 33, "hidden": 7168, "heads": 128, "ffn": 18432,
                     "vocab": 129280, "seq_len": 4096, "experts": 256, "top_k": 8, "mtp_layers": 1,
                     "attention": "mla", **MLA}
    scn = scenario_from_dict(data)
    assert stack_layout(scn.model, MB, 8, 2) == () and stack_chunk_layers(scn.model, scn.plan) == ()


def test_a_new_pipeline_on_the_command_line_is_laid_out_anew(tmp_path, capsys):
    path = tmp_path / "dsv3.yaml"
    path.write_text(yaml.safe_dump(_case()))
    assert main(["predict", str(path), "--pp", "8", "--dp", "32"]) == 0
    out = capsys.readouterr().out
    assert "chunks of 8 layers from the first and 5 in the last" in out
    assert main(["predict", str(path), "--pipeline-schedule", "dualpipe"]) == 0
    assert "pipeline split:" not in capsys.readouterr().out
    assert main(["predict", str(path), "--precision", "bf16"]) == 0  # another format keeps the stack's layout
    assert "chunks of 4 layers from the first and 1 in the last" in capsys.readouterr().out
    assert main(["predict", str(path), "--last-stage-layers", "1", "--json"]) == 0  # a split given replaces it
    out = capsys.readouterr().out
    assert '"last_stage_layers": 1' in out and "pipeline split:" not in out
