"""Redundant expert copies (`plan.redundant_experts`): an expert load balancer's extra slots beside the model's
experts, which let ep divide experts + copies (SGLang's DeepSeek-V3 decode at EP 72 over 256 + 32 slots, LMSYS
96-H100 blog) — each rank holds (E + R)/ep slots of weights; refused without a balancer, on a dense model, and when ep
does not divide the slots."""
from __future__ import annotations

import json

import pytest

from narrowpath.catalog.resolve import resolve_model, system_or_device
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.spec.serving import ServingPlan, serving_consistency
from narrowpath.workload.serving import Formats, layer_weight_bytes, moe_token_ops

DSV3 = resolve_model("deepseek-v3")
H100 = system_or_device("dgx-h100")


def _plan(ep: int, redundant: int, **kw) -> ServingPlan:
    return ServingPlan(tp=1, dp=ep, ep=ep, weight_precision="fp8", kv_precision="fp8", expert_balance="eplb",
                       redundant_experts=redundant, replicas=1, **kw)


def test_ep_72_divides_256_experts_only_with_32_copies():
    assert serving_consistency(DSV3, _plan(72, 32), 72, H100) == []
    errs = dict(serving_consistency(DSV3, _plan(72, 0), 72, H100))
    assert errs["plan.ep"] == "ep 72 does not divide model.moe.num_experts 256"
    errs = dict(serving_consistency(DSV3, _plan(64, 32), 64, H100))
    assert errs["plan.ep"] == "ep 64 does not divide model.moe.num_experts 256 + plan.redundant_experts 32 = 288"


def test_copies_need_a_balancer_and_an_moe_model():
    with pytest.raises(SpecError, match="plan.redundant_experts.*expert_balance eplb"):
        ServingPlan(redundant_experts=32)
    with pytest.raises(SpecError, match="plan.redundant_experts"):
        ServingPlan(redundant_experts=-1)
    dense = resolve_model("llama3-8b")
    errs = dict(serving_consistency(dense, ServingPlan(expert_balance="eplb", redundant_experts=8), 1, H100))
    assert errs["plan.redundant_experts"] == "redundant expert copies need an MoE model"


def test_each_rank_holds_its_share_of_the_slots():
    """EP 72 with 32 copies: 288 / 72 = 4 expert slots per GPU, as EP 64 without copies (256 / 64): the same routed
    weights per GPU; EP 32 with 32 copies holds 9 slots, one routed expert's three matrices (gate, up, down:
    3 · 7,168 · 2,048 FP8 bytes) more than EP 32's 8."""
    f = Formats.of(_plan(72, 32), True, DSV3)
    assert layer_weight_bytes(DSV3, _plan(72, 32), f, True) == pytest.approx(
        layer_weight_bytes(DSV3, _plan(64, 0), f, True), rel=1e-12)
    more = layer_weight_bytes(DSV3, _plan(32, 32), f, True) - layer_weight_bytes(DSV3, _plan(32, 0), f, True)
    assert more == pytest.approx(3 * 7168 * 2048 * 1.0, rel=1e-9)


def test_a_small_decode_batch_reads_fewer_slots_than_it_holds():
    """4 tokens × 72 ranks, each choosing 8 distinct of 288 slots: a slot stays idle with probability
    (1 − 8/288)^288 ≈ e^−8, so nearly all 4 slots of a GPU are read; at 1 token per rank (72 tokens, 576 copies)
    each slot is idle with probability (280/288)^72 = 0.1316: 4 · 0.8684 = 3.47 slots read."""
    p = _plan(72, 32)
    f = Formats.of(p, True, DSV3)
    up = {op.name: op for op in moe_token_ops(DSV3, p, f, 1.0)}["expert_up"]
    slots_read = up.weight_bytes / (7168 * 2 * 2048 * 1.0)  # one slot's gate and up matrices in FP8
    assert slots_read == pytest.approx(4 * (1 - (280 / 288) ** 72), rel=1e-9)
    big = {op.name: op for op in moe_token_ops(DSV3, p, f, 4.0)}["expert_up"]
    assert 3.99 < big.weight_bytes / (7168 * 2 * 2048) < 4.0


def test_the_flag_reaches_the_plan_and_the_console(capsys):
    args = ["serve", "--model", "deepseek-v3", "--system", "dgx-h100", "--gpus", "72", "--tp", "1", "--dp", "72",
            "--ep", "72", "--weights", "fp8", "--kv", "fp8", "--expert-balance", "eplb", "--redundant-experts", "32",
            "--offline", "--input-len", "256", "--output-len", "8", "--num-requests", "144", "--no-whatif"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["plan"]["redundant_experts"] == 32
    assert main(args) == 0
    assert "32 redundant experts" in capsys.readouterr().out
    assert main(args + ["--expert-balance", "learned"]) == 2  # the last --expert-balance wins
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plan.redundant_experts" in err[0]


def test_copies_need_expert_parallel_ranks_to_spread_over():
    """ep 1 holds every expert already: copies there would only add weights (gpt-oss-120b tp 8: 14.8 -> 21.9 GB)."""
    errs = dict(serving_consistency(DSV3, ServingPlan(tp=8, ep=1, expert_balance="eplb", redundant_experts=32), 8,
                                    H100))
    assert errs["plan.redundant_experts"] == ("redundant expert copies spread hot experts over expert-parallel ranks: "
                                              "give ep > 1")


def test_the_search_keeps_copies_only_where_they_divide(capsys):
    """gpt-oss-120b (128 experts) on 16 GPUs with 8 copies: ep 8 keeps them (136 / 8 = 17 slots a rank), ep 16 and
    ep 1 run without (136 is no multiple of 16; ep 1 has nothing to spread) — a search from a copied plan does not
    lose the layouts the copies do not fit."""
    from narrowpath.search.serve_space import redundant_for
    gpt = resolve_model("gpt-oss-120b")
    base = ServingPlan(expert_balance="eplb", redundant_experts=8)
    assert [redundant_for(gpt, base, ep) for ep in (1, 2, 4, 8, 16)] == [0, 8, 8, 8, 0]
    assert redundant_for(resolve_model("llama3-8b"), base, 8) == 0
    args = ["search", "--serve", "--model", "gpt-oss-120b", "--system", "dgx-h100", "--gpus", "16", "--expert-balance",
            "eplb", "--redundant-experts", "8", "--input-len", "256", "--output-len", "16", "--slo-ttft", "10",
            "--slo-tpot", "1", "--json", "--top", "1000"]
    assert main(args) == 0
    plans = [r["plan"] for r in json.loads(capsys.readouterr().out)["ranked"]]
    assert {p["ep"] for p in plans} >= {1, 8, 16}
    assert all(p["redundant_experts"] == (8 if p["ep"] in (2, 4, 8) else 0) for p in plans)
    assert all(p["expert_balance"] == "eplb" for p in plans)
