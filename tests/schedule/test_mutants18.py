"""Values the seed-18 mutation sample (benchmarks/mutation.py) found unguarded in schedule/ — the module sets
offered for a dense model's unpublished recompute, the pipeline bubble of 1F1B, Narayanan's bubble fraction without
interleaving, the refusal of an interleaved split Megatron-LM refuses, the span of the first and last pipeline stage
and of a pipeline of one stage, the words of predict's refusal of inference, and the MTP projection's place in the
output chunk — each pinned by a hand calculation."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import NarrowpathError, SimulationError
from narrowpath.schedule.choose import module_patches
from narrowpath.schedule.pipeline import bubble_fraction, bubble_time_s, played_time_s
from narrowpath.schedule.step import _op_sums, predict, transfer_span
from narrowpath.spec import Plan, Scenario
from narrowpath.workload import ops as T

H100 = system("dgx-h100")


def _scn(plan: Plan, **kw) -> Scenario:
    return Scenario(system=H100, model=model("llama3-8b"), plan=plan, num_gpus=plan.num_gpus, **kw)


def test_a_dense_models_module_patches_are_megatron_bridges_mlp_sets():
    """Llama 3 8B has neither experts nor MLA, so the selective-recompute sets Megatron-Bridge's performance
    configs use for it are the dense MLP alone and the norms with it: ('mlp',), ('layernorm', 'mlp') — module
    names of Megatron-Core's --recompute-modules, each a plan spec.plan accepts."""
    patches = module_patches(model("llama3-8b"))
    assert patches == ({"recompute": "selective", "recompute_modules": ("mlp",)},
                       {"recompute": "selective", "recompute_modules": ("layernorm", "mlp")})
    for patch in patches:
        dataclasses.replace(Plan(), **patch)  # a valid plan


def test_the_1f1b_bubble_is_p_minus_one_micro_batch_times():
    """Equal stages of T = 3 s per micro-batch (forward 1 + backward 2), p 4, m 8 (Narayanan et al. SC'21
    §2.2.1): the step takes (m + p − 1)·T = 11·3 = 33 s, of which the busiest stage works m·T = 24 s: a bubble of
    (p − 1)·T = 9 s; interleaved with v 2 it shrinks to (p − 1)·T/v = 4.5 s."""
    assert bubble_time_s([3.0] * 4, 8) == pytest.approx(9.0)
    assert bubble_time_s([3.0] * 4, 8, 2) == pytest.approx(4.5)


def test_the_bubble_fraction_without_interleaving_is_p_minus_one_over_m():
    """Narayanan et al. SC'21: (p − 1)/(v·m); plain 1F1B (v = 1) on p 4 with m 12: 3/12 = 0.25 (v 2 halves it)."""
    assert bubble_fraction(4, 12) == 0.25
    assert bubble_fraction(4, 12, 2) == 0.125


def test_an_interleaved_split_megatron_refuses_is_refused_when_played():
    """Megatron-LM's interleaved schedule takes micro-batches in groups of p per chunk and refuses m not divisible
    by p: p 2, v 2, m 3 is refused with the reason (a SimulationError), whatever the pass times; m 4 plays:
    equal chunks, F 1, B 2 per micro-batch → (m + (p − 1)/v)·(F + B) = 4.5·3 = 13.5."""
    fwd, bwd = [[0.5, 0.5]] * 2, [[1.0, 1.0]] * 2
    with pytest.raises(SimulationError, match="3 micro-batches are not divisible by the 2 pipeline stages"):
        played_time_s("interleaved", fwd, bwd, 3, "async")
    assert played_time_s("interleaved", fwd, bwd, 4, "async") == pytest.approx(13.5)


def test_the_first_and_last_stage_of_three_sit_on_different_servers():
    """tp 4, pp 3 on DGX H100 (8 GPUs per NVLink domain and server), 12 GPUs: stage s holds ranks 4s..4s + 3, so
    stage 0 starts at rank 0 and stage 2 (the last) at rank 4·(3 − 1) = 8 — the second server. The tied-embedding
    pair (pp_ends) is one rank in each of 2 domains, over the scale-out fabric only; so is the pipeline's slowest
    neighbour pair (stage 1, ranks 4–7, sends to stage 2, ranks 8–11, on the other server), which sets the pace of
    every boundary."""
    scn = _scn(Plan(tp=4, pp=3, gbs=3))
    ends = transfer_span(scn, "pp_ends")
    assert (ends.size, ends.ranks_per_domain, ends.domains, ends.nodes) == (2, 1, 2, 2)
    assert ends.tiers == ("scale_out",)
    near = transfer_span(scn, "pp")
    assert (near.size, near.domains, near.tiers) == (2, 2, ("scale_out",))


def test_the_pipeline_group_of_a_one_stage_plan_is_one_rank():
    """A plan without pipelining (pp 1) has no neighbouring stage: its pp group is the rank alone, which sends on
    no tier — on one server (tp 8) and across two (dp 16) alike."""
    for plan in (Plan(tp=8, gbs=1), Plan(dp=16, gbs=16)):
        span = transfer_span(_scn(plan), "pp")
        assert span.size == 1 and span.tiers == ()


def test_predict_refuses_inference_pointing_to_serve():
    """predict models a training step only; an inference scenario is refused with the command that models it."""
    with pytest.raises(NarrowpathError) as err:
        predict(_scn(Plan(tp=8, gbs=1), mode="inference"))
    assert str(err.value) == ("mode: 'inference' is not modelled yet by the training step (predict, analyze, "
                              "search); use `narrowpath serve` for inference")


def test_the_mtp_projection_counts_as_output_chunk_work():
    """DeepSeek-V3's multi-token-prediction module (§2.2) runs after the last layer, beside the output head, so its
    2h → h projection sits in the output end's items (workload.build._embedding_work of the last stage), which
    schedule.chunks puts in the head stage's last chunk; _op_sums adds its GEMMs up per phase. Priced at one second
    per FLOP: h 1024, 4096 rows, tp 1: forward 2·4096·2048·1024 = 17,179,869,184 FLOPs, and dgrad and wgrad as many
    backward: 2 · 17,179,869,184 = 34,359,738,368; the qkv GEMM beside it adds 2·4096·1024·3072 forward."""
    plan = Plan()
    proj = T.linear("mtp_proj", plan, 4096, 2048, 1024)
    ops = proj + T.backward_ops(proj, plan) + [T.gemm("qkv", "fwd", 4096, 1024, 3072, "bf16", 2, 2)]
    sums = _op_sums([(op, 1.0) for op in ops], lambda op: (op.flop, False, 0.0))
    assert sums.comp["bwd"] == 34_359_738_368.0
    assert sums.comp["fwd"] == 17_179_869_184.0 + 2 * 4096 * 1024 * 3072
    from narrowpath.catalog import load_scenario
    dsv3 = load_scenario("deepseek-v3-h800-2048")
    scn = dataclasses.replace(dsv3, plan=dataclasses.replace(dsv3.plan, pipeline_schedule="auto", vpp=2, pp=8,
                                                              dp=256, gbs=4096))
    wl = predict(scn).workload
    assert any(op.name.startswith("mtp_proj") for op, _ in wl.end_work[1][0])
    assert not any(op.name.startswith("mtp_proj") for op, _ in wl.end_work[0][0])
