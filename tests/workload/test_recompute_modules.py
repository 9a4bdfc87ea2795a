"""Selective recompute by module (Megatron-Core --recompute-modules): what each module drops from the activations a
layer keeps and what it runs again, by hand on DeepSeek-V3 (MLA, MoE with a shared expert) and Llama-3 70B."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cost.memory import layer_activation_bytes
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec.parse import plan_from_dict
from narrowpath.spec.plan import Plan
from narrowpath.workload import transformer as T
from narrowpath.workload.build import layer_comm, layer_ops
from narrowpath.workload.recompute import modules_of

TOKENS = 4096  # DeepSeek-V3 scenario: mbs 1, seq 4096, tp 1, cp 1


def _with(scenario: str, mods=(), rc: str | None = None, **kw):
    """The catalog scenario with selective recompute of `mods` (no recompute when there are none, unless `rc`)."""
    s = load_scenario(scenario)
    rc = rc or ("selective" if mods else "none")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute=rc, recompute_modules=mods, **kw))


def _ds(mods=(), **kw):
    """FP8, tp 1: projections keep 1-byte inputs, the rest 2 bytes (the framework's own storage, not the scenario's
    DeepSeek-V3 low-precision cache: test_activation_cache.py)."""
    return _with("deepseek-v3-h800-2048", mods, **{"activation_cache": "default", **kw})


def _llama(mods=(), **kw):
    return _with("llama3-70b-h100-256", mods, **kw)  # BF16, tp 8 with sequence parallelism


def _kept(scn, moe_layer=True):
    return layer_activation_bytes(scn, "flash", moe_layer=moe_layer)


def _again(scn, moe_layer=True):
    return sorted(op.name for op, _ in layer_ops(scn, "flash", moe_layer) if op.phase == "recompute")


def test_layernorm_drops_what_the_projections_after_the_norms_keep():
    """The norms' outputs are read by q_down and kv_down (FP8 copies, 7,168 B a token each), the router (BF16,
    14,336 B) and the shared expert's up-projection (FP8, 7,168 B): 35,840 B a token are no longer kept; the two
    norms run again and re-quantize the projections' inputs."""
    assert _kept(_ds()) - _kept(_ds(("layernorm",))) == pytest.approx(TOKENS * (7168 + 7168 + 14336 + 7168))
    assert _again(_ds(("layernorm",))) == ["kv_down.quantize", "ln1", "ln2", "q_down.quantize",
                                            "shared_up.quantize"]


def test_layernorm_fused_into_a_projection_is_no_module():
    """Transformer Engine fuses a dense layer's norms into the qkv and up-projections (LayerNormLinear):
    Megatron-Core has no separate norm to recompute, so `layernorm` changes nothing on Llama-3 70B. DeepSeek-V3's
    dense leading layers keep only MLA's separate input norm: q_down's and kv_down's 7,168 B a token."""
    none, ln = _llama(), _llama(("layernorm",))
    assert _kept(ln, False) == _kept(none, False)
    assert _again(ln, False) == []
    assert _kept(_ds(), False) - _kept(_ds(("layernorm",)), False) == pytest.approx(TOKENS * (7168 + 7168))
    assert _again(_ds(("layernorm",)), False) == ["kv_down.quantize", "ln1", "q_down.quantize"]


def test_mla_up_proj_drops_the_query_key_and_value_the_attention_core_keeps():
    """128 heads of query and key 192 wide and value 128 wide, BF16: 4096 · 128 · (2·192 + 128) · 2 B; and the
    up-projections run without autograd, so their FP8 inputs (1,536 + 512 B a token) are not kept either. The
    latent norms, up-projections (with their input quantization) and RoPE run again: the up-projections' forward
    FLOPs once more."""
    assert _kept(_ds()) - _kept(_ds(("mla_up_proj",))) == pytest.approx(
        TOKENS * 128 * (2 * 192 + 128) * 2 + TOKENS * (1536 + 512))
    scn = _ds(("mla_up_proj",))
    again = [op for op, _ in layer_ops(scn, "flash", True) if op.phase == "recompute"]
    assert sorted(op.name for op in again) == ["kv_norm", "kv_up", "kv_up.quantize", "q_norm", "q_up",
                                               "q_up.quantize", "rope"]
    fwd = {op.name: op for op in T.layer_forward_ops(scn.model, scn.plan, "flash", moe_layer=True)}
    q, kv = scn.model.mla.q_lora_rank, scn.model.mla.kv_lora_rank
    assert sum(op.flop for op in again) == pytest.approx(
        2 * TOKENS * (q * 128 * 192 + kv * 128 * (128 + 128)))
    assert sum(op.flop for op in again) == pytest.approx(fwd["q_up"].flop + fwd["kv_up"].flop)


def test_moe_act_drops_the_down_projections_input():
    """The experts' activation output is the down-projection's (FP8) input: rows × 2048 B; the activation and
    that quantization run again."""
    scn = _ds(("moe_act",))
    fwd = {op.name: op for op in T.layer_forward_ops(scn.model, scn.plan, "flash", moe_layer=True)}
    rows = fwd["expert_down"].flop / (2 * 2048 * 7168)
    assert _kept(_ds()) - _kept(scn) == pytest.approx(rows * 2048 * 1)
    assert _again(scn) == ["expert_act", "expert_down.quantize"]


def test_moe_keeps_only_the_blocks_input_and_dispatches_again():
    """The whole MoE block is checkpointed from its input (what the router keeps): it keeps the attention half, the
    second norm's input and the router's input, and runs router, dispatch, experts and combine again."""
    base = _ds()
    ops = T.layer_forward_ops(base.model, base.plan, "flash", moe_layer=True)
    attn_half = sum(op.saved_bytes for op in ops[:ops.index(next(o for o in ops if o.name == "ln2"))])
    want = attn_half + TOKENS * 7168 * 2 + TOKENS * 7168 * 2  # + ln2's input + the router's input (BF16)
    assert _kept(_ds(("moe",))) == pytest.approx(want)
    phases = [tr.phase for tr, _ in layer_comm(_ds(("moe",)), "flash", True) if tr.axis.startswith("ep")]
    assert "recompute" in phases
    assert "recompute" not in [tr.phase for tr, _ in layer_comm(_ds(("moe_act",)), "flash", True)]


def test_a_module_a_layer_lacks_changes_nothing():
    """A dense layer has no experts and no MoE block; Llama has no MLA."""
    assert _kept(_ds(("moe_act",)), moe_layer=False) == _kept(_ds(), moe_layer=False)
    assert _kept(_ds(("moe",)), moe_layer=False) == _kept(_ds(), moe_layer=False)
    base, up = _llama(), _llama(("mla_up_proj",))
    assert _kept(up, False) == _kept(base, False)
    assert _again(up, False) == []


def test_mlp_keeps_its_input_only():
    """Llama-3 70B dense MLP (tp 8, sp): everything the block keeps is dropped — the checkpoint's input is the
    residual the fused norm ln2 already keeps — and the norm runs again with the block."""
    none, mlp = _llama(), _llama(("mlp",))
    fwd = {op.name: op for op in T.layer_forward_ops(none.model, none.plan, "flash")}
    assert _kept(none, False) - _kept(mlp, False) == pytest.approx(fwd["mlp_up"].saved_bytes
                                                                   + fwd["mlp_act"].saved_bytes
                                                                   + fwd["mlp_down"].saved_bytes)
    assert _again(mlp, False) == ["ln2", "mlp_act", "mlp_down", "mlp_up"]
    # the recomputed tp-sharded block gathers and scatters again (one pair)
    assert any(tr.phase == "recompute" and tr.axis == "tp" for tr, _ in layer_comm(mlp, "flash", False))


def test_default_module_is_the_attention_core():
    """`selective` without modules is Korthikanti's: the attention core."""
    assert modules_of(Plan(recompute="selective")) == {"core_attn"}
    assert modules_of(Plan(recompute="none", recompute_modules=("mlp",))) == frozenset()  # read under selective only
    core, plain = _llama(("core_attn",)), _llama(rc="selective")
    assert predict(core).step_time_s == predict(plain).step_time_s
    assert predict(core).memory.total_bytes == predict(plain).memory.total_bytes


@pytest.mark.parametrize("mods", [("layernorm",), ("mla_up_proj",), ("moe_act",), ("moe",), ("shared_experts",),
                                  ("layernorm", "mla_up_proj", "moe_act")])
def test_recomputing_more_keeps_less_and_takes_longer(mods):
    """Every module keeps less than no recompute and more than full recompute, and costs time."""
    none, more = predict(_ds()), predict(_ds(mods))
    full = predict(_ds(rc="full"))
    assert full.memory.items["activations"] < more.memory.items["activations"] < none.memory.items["activations"]
    assert more.step_time_s > none.step_time_s


def test_bad_modules_are_refused_naming_the_field():
    with pytest.raises(SpecError, match=r"plan\.recompute_modules.*needs recompute: selective"):
        plan_from_dict({"recompute": "full", "recompute_modules": ["mlp"]})
    with pytest.raises(SpecError, match=r"plan\.recompute_modules.*must be one of"):
        plan_from_dict({"recompute": "selective", "recompute_modules": ["attention"]})
    with pytest.raises(SpecError, match=r"plan\.recompute_modules.*twice"):
        plan_from_dict({"recompute": "selective", "recompute_modules": ["mlp", "mlp"]})
    with pytest.raises(SpecError, match=r"plan\.recompute_modules.*must list"):
        plan_from_dict({"recompute": "selective", "recompute_modules": "mlp"})


def test_search_prices_a_base_plans_modules_as_predict():
    """The search's selective plans recompute the base plan's modules or one of the chooser's module sets
    (search.space.activation_strategies); its closed form equals predict."""
    from narrowpath.schedule.choose import module_patches
    from tests.search.scenarios import bulk_sample
    base = _ds(("layernorm", "mla_up_proj", "moe_act"))
    sets = {frozenset(p["recompute_modules"]) for p in module_patches(base.model)}
    sets.add(frozenset(base.plan.recompute_modules))
    for plan, t, mem, scn in bulk_sample(base, {"recompute": "selective"}, 10, 5):
        assert frozenset(plan.recompute_modules) in sets
        pred = predict(scn)
        assert t == pytest.approx(pred.step_time_s, rel=1e-12), plan
        assert mem == pytest.approx(pred.memory.total_bytes, rel=1e-12), plan


@pytest.mark.parametrize("flags,fragment", [
    (["--recompute", "full", "--recompute-modules", "mlp"], "--recompute-modules"),
    (["--recompute", "selective", "--recompute-modules", "attn"], "plan.recompute_modules"),
])
def test_cli_refuses_bad_modules_in_one_line(capsys, flags, fragment):
    from tests.cli.one_line import one_line_error
    one_line_error(capsys, ["predict", "deepseek-v3-h800-2048", *flags], fragment)


def test_cli_modules_reach_the_plan(capsys):
    import json

    from narrowpath.cli.main import main
    assert main(["predict", "deepseek-v3-h800-2048", "--recompute", "selective", "--recompute-modules",
                 "layernorm,mla_up_proj", "--json"]) in (0, 1)
    d = json.loads(capsys.readouterr().out)
    assert d["plan"]["recompute_modules"] == ["layernorm", "mla_up_proj"]
    assert d["memory"]["items_bytes"]["activations"] < predict(_ds()).memory.items["activations"]


def test_recomputed_unfused_core_of_a_window_layer_costs_its_forward_core():
    """Selective recompute of `core_attn` with the unfused kernel runs the layer's attention core again: on a
    sliding-window layer (window 128 of s = 4096) the recomputed scores, softmax and AV attend the same 128 keys as
    the forward ones, so each recomputed op has its forward twin's FLOPs and bytes. The unfused kernel materialises
    the whole s × s score matrix and masks it, window or not: scores 2·b·a·s·s·d = 2·1·8·4096·4096·128 FLOPs."""
    from narrowpath.spec.model import Model
    base = load_scenario("llama3-70b-h100-256")
    m = Model(layers=4, hidden=1024, heads=8, vocab=1000, seq_len=4096, sliding_window=128, sliding_window_every=2)
    plan = dataclasses.replace(base.plan, tp=1, pp=1, vpp=1, sequence_parallel=False, recompute="selective",
                               recompute_modules=("core_attn",), attention="unfused")
    scn = dataclasses.replace(base, model=m, plan=plan, num_gpus=plan.dp)
    for window in (True, False):
        ops = [op for op, _ in layer_ops(scn, "unfused", False, window=window)]
        fwd = {op.name: op for op in ops if op.phase == "fwd"}
        again = [op for op in ops if op.phase == "recompute"]
        assert sorted(op.name for op in again) == sorted(n for n in ("attn_scores", "softmax", "attn_dropout",
                                                                      "attn_av") if n in fwd)
        for op in again:
            assert (op.flop, op.hbm_bytes) == (fwd[op.name].flop, fwd[op.name].hbm_bytes), op.name
        assert fwd["attn_scores"].flop == 2.0 * 1 * 8 * 4096 * 4096 * 128


@pytest.mark.parametrize("kernel, a, b", [("unfused", "core_attn", "layernorm"), ("flash", "moe_act", "shared_experts")])
def test_modules_that_drop_disjoint_sets_save_the_sum(kernel, a, b):
    """On a DeepSeek-V3 MoE layer two modules whose discarded tensors do not overlap save together exactly what each
    saves alone: `core_attn` (with the unfused core: the softmax, dropout and weighted sum) and `layernorm` (the norms'
    consumers); `moe_act` (the routed experts' down-projection input) and `shared_experts` (the shared expert's whole
    block). Found unguarded by mutation seeds 13 and 14 (a module's set replacing, not joining, the others')."""
    def kept(mods):
        return layer_activation_bytes(_ds(mods), kernel, moe_layer=True)

    none, ka, kb = kept(()), kept((a,)), kept((b,))
    assert none - ka > 0 and none - kb > 0
    assert none - kept((a, b)) == pytest.approx((none - ka) + (none - kb))

