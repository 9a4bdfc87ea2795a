"""Learned routing's skew at inference: the busiest expert-parallel rank of a served MoE model, checked against
the one published measurement of it (NVIDIA TensorRT-LLM tech blog 4, 'Scaling Expert Parallelism in
TensorRT-LLM, Part 1', Table 1: DeepSeek-R1 at inference on 32 GB200, a machine-translation data set, no expert load
balancer — per expert slot 128 copies on average, std 164.1; per rank 1,024, std 491.6, the busiest rank 2.564×
the mean on average over layers and iterations; with EPLB the busiest rank is 1.109-1.115× the mean)."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml

from narrowpath.analysis.serving_accounts import serving_accounts
from narrowpath.analysis.serving_whatif import serving_verdict
from narrowpath.catalog.resolve import resolve_model, system_or_device
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.plan import Plan
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.moe import (FINE_GRAINED_EXPERTS, LEARNED_EXPERT_LOAD_CV, busiest_rank_factor,
                                     learned_rank_cv2, router_load_cv, routing_imbalance)
from narrowpath.workload.serving import Formats, moe_token_ops


def test_the_expert_spread_is_the_blogs_per_slot_figure():
    assert LEARNED_EXPERT_LOAD_CV == pytest.approx(164.1 / 128, abs=0.005)


def test_rank_spread_from_expert_spread_matches_the_measured_rank_spread():
    """256 experts on 32 ranks, 8 each: cv_rank = 1.282·√((256 − 8) / (8·255)) = 0.447 by hand; the table's ranks
    vary by 491.6 / 1024 = 0.480 — the experts of a rank are close to independent draws."""
    cv = math.sqrt(learned_rank_cv2(256, 32))
    assert cv == pytest.approx(0.447, abs=0.002)
    assert cv == pytest.approx(491.6 / 1024, rel=0.10)


def test_busiest_rank_errs_on_the_fast_side_of_the_measurement():
    """1 + √(2 ln 32 · (1/1024 + 0.2)) = 2.18 by hand, under the measured 2.564 (hot experts: a heavier tail than
    Gaussian) and well over random assignment's 1.082."""
    f = busiest_rank_factor(32, 1024.0, learned_rank_cv2(256, 32))
    assert f == pytest.approx(2.18, abs=0.01)
    assert busiest_rank_factor(32, 1024.0) < f < 2.564
    # with EPLB the table's busiest rank is 1.109-1.115x; random assignment's bound, which `eplb` prices,
    # 1 + √(2 ln 32 / 1024) = 1.082 by hand, is within 3 % of it
    assert busiest_rank_factor(32, 1024.0) == pytest.approx(1.082, abs=0.001)
    assert busiest_rank_factor(32, 1024.0) == pytest.approx(1.112, rel=0.03)


def test_no_skew_is_the_random_bound_training_keeps():
    for ep, n in ((8, 4096.0), (64, 100.0), (2, 1.0)):
        assert busiest_rank_factor(ep, n) == pytest.approx(1 + math.sqrt(2 * math.log(ep) / n))
        assert routing_imbalance(Plan(ep=ep, dp=ep, gbs=ep), n) == busiest_rank_factor(ep, n)
    assert busiest_rank_factor(1, 100.0, 0.5) == 1.0 and busiest_rank_factor(8, 0.0, 0.5) == 1.0
    assert routing_imbalance(Plan(ep=8, dp=8, gbs=8, moe_routing="token-drop"), 100.0) == 1.0


@pytest.mark.parametrize("experts,ep", [(8, 8), (128, 8), (256, 8), (256, 64), (64, 2)])
def test_skew_shrinks_as_a_rank_holds_more_experts_and_vanishes_with_one_rank(experts, ep):
    assert learned_rank_cv2(experts, 1) == 0.0
    assert learned_rank_cv2(experts, ep) > 0.0
    if ep > 2:
        assert learned_rank_cv2(experts, ep // 2) < learned_rank_cv2(experts, ep)
    f = [busiest_rank_factor(ep, n, learned_rank_cv2(experts, ep)) for n in (10.0, 1e3, 1e6)]
    assert f[0] > f[1] > f[2] > 1.0  # more copies: the random part averages out, the skew stays
    assert f[2] == pytest.approx(1 + math.sqrt(2 * math.log(ep) * learned_rank_cv2(experts, ep)), rel=1e-3)
    assert learned_rank_cv2(experts, ep, 0.0) == 0.0


def _mixtral(balance: str, ep: int = 8) -> ServingScenario:
    plan = ServingPlan(tp=2, dp=4, ep=ep, weight_precision="fp8", kv_precision="fp8", expert_balance=balance)
    return ServingScenario(model=resolve_model("mixtral-8x7b"), system=system_or_device("dgx-h100"), plan=plan,
                           load=Load(arrival="offline", input_tokens=512, output_tokens=64, num_requests=200),
                           num_gpus=8)


def _deepseek(balance: str, ep: int = 8) -> ServingScenario:
    """DeepSeek-V3 as the TensorRT-LLM blogs serve R1: NVFP4 on one DGX B200, attention DP 8, experts EP 8."""
    plan = ServingPlan(tp=1, dp=8, ep=ep, weight_precision="fp4", kv_precision="fp8", expert_balance=balance)
    return ServingScenario(model=resolve_model("deepseek-v3"), system=system_or_device("dgx-b200"), plan=plan,
                           load=Load(arrival="offline", input_tokens=256, output_tokens=32, num_requests=200),
                           num_gpus=8)


def _expert_flop(scn: ServingScenario, T: float = 256.0) -> float:
    f = Formats.of(scn.plan, True, scn.model)
    return sum(op.flop for op in moe_token_ops(scn.model, scn.plan, f, T) if op.name.startswith("expert"))


def test_fine_grained_routers_carry_the_skew_coarse_ones_do_not():
    assert router_load_cv(256) == router_load_cv(FINE_GRAINED_EXPERTS) == LEARNED_EXPERT_LOAD_CV
    assert router_load_cv(8) == router_load_cv(16) == router_load_cv(FINE_GRAINED_EXPERTS - 1) == 0.0
    assert _expert_flop(_deepseek("learned")) > 1.2 * _expert_flop(_deepseek("eplb"))
    assert _expert_flop(_mixtral("learned")) == _expert_flop(_mixtral("eplb"))


def test_ep_1_prices_alike_whatever_the_balance():
    """Experts in tensor parallelism: every GPU holds a slice of each expert, so no rank is hotter."""
    a, b = _deepseek("learned"), _deepseek("eplb")
    a = dataclasses.replace(a, plan=dataclasses.replace(a.plan, ep=1))
    b = dataclasses.replace(b, plan=dataclasses.replace(b.plan, ep=1))
    fa, fb = Formats.of(a.plan, True, a.model), Formats.of(b.plan, True, b.model)
    assert [op.flop for op in moe_token_ops(a.model, a.plan, fa, 256.0)] == \
        [op.flop for op in moe_token_ops(b.model, b.plan, fb, 256.0)]


def test_a_balancer_is_offered_as_a_whatif_and_gains():
    run = simulate(_deepseek("learned"), ())
    verdict = serving_verdict(run, serving_accounts(run))
    w = {x.name: x for x in verdict.whatifs}
    assert "expert load balancer" in w and w["expert load balancer"].gain > 0
    assert "8 expert-parallel ranks" in w["expert load balancer"].change
    for scn, why in ((_deepseek("eplb"), "already evens"), (_mixtral("learned"), "coarse router of 8 experts")):
        run = simulate(scn, ())
        verdict = serving_verdict(run, serving_accounts(run))
        assert "expert load balancer" not in {x.name for x in verdict.whatifs}
        assert why in dict(verdict.skipped)["expert load balancer"]


def test_a_bad_setting_is_refused_naming_the_field(tmp_path, capsys):
    with pytest.raises(SpecError, match="plan.expert_balance"):
        ServingPlan(expert_balance="hot")
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"system": "dgx-h100", "model": "mixtral-8x7b", "num_gpus": 8,
                                 "plan": {"tp": 2, "dp": 4, "ep": 8, "expert_balance": "round-robin"},
                                 "workload": {"scenario": "offline", "input_tokens": 100, "output_tokens": 10,
                                              "num_requests": 10}}))
    assert main(["serve", str(f), "--no-whatif"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plan.expert_balance" in err[0] and "Traceback" not in err[0]


def test_the_flag_reaches_the_plan_and_the_console(capsys):
    args = ["serve", "--model", "deepseek-v3", "--system", "dgx-b200", "--tp", "1", "--dp", "8", "--ep", "8",
            "--weights", "fp4", "--kv", "fp8", "--offline", "--input-len", "256", "--output-len", "16",
            "--num-requests", "40", "--no-whatif"]
    assert main(args + ["--json"]) == 0
    learned = json.loads(capsys.readouterr().out)
    assert learned["scenario"]["plan"]["expert_balance"] == "learned"
    assert main(args + ["--json", "--expert-balance", "eplb"]) == 0
    eplb = json.loads(capsys.readouterr().out)
    assert eplb["scenario"]["plan"]["expert_balance"] == "eplb"
    assert eplb["output_tokens_per_s"] > learned["output_tokens_per_s"]
    assert main(args) == 0
    assert "expert balance learned" in capsys.readouterr().out


def test_rank_spread_by_hand():
    """cv²·(E − k)/(k·(E − 1)): 1.28²·248/(8·255) = 0.19926; at cv 0.5, 0.25·248/2040 = 0.030392; Mixtral's 8
    experts one per rank: 1.28²·7/7 = 1.6384."""
    assert learned_rank_cv2(256, 32) == pytest.approx(1.28 ** 2 * 248 / (8 * 255), rel=1e-12)
    assert learned_rank_cv2(256, 32, 0.5) == pytest.approx(0.25 * 248 / 2040, rel=1e-12)
    assert learned_rank_cv2(8, 8) == pytest.approx(1.6384, rel=1e-12)
    assert learned_rank_cv2(1, 1) == 0.0  # one expert on one rank: nothing to be hotter than


def test_busiest_rank_rows_by_hand():
    """DeepSeek-V3 on dp 8 · ep 8 at 256 tokens a rank: 256·8·8 = 16,384 copies, 2,048 a rank, 32 experts a rank.
    Balanced: 1 + √(2 ln 8 / 2048) = 1.045063; learned: s = 1.28²·224/(32·255) = 0.044976,
    1 + √(2 ln 8 · (1/2048 + s)) = 1.434833. The permute reads once the tokens an all-to-all delivers to the rank —
    of the 256·8 = 2,048 entering the experts, 2,048·d/8 with d = 8·(1 − C(224, 8)/C(256, 8)) ranks a token
    reaches — and writes the busiest rank's rows: (2,048·d/8 + rows) × 7,168 × 2 bytes."""
    def permute_bytes(balance):
        scn = _deepseek(balance)
        f = Formats.of(scn.plan, True, scn.model)
        return next(op.hbm_bytes for op in moe_token_ops(scn.model, scn.plan, f, 256.0) if op.name == "moe_permute")
    d = 8 * (1 - math.prod((224 - i) / (256 - i) for i in range(8)))
    assert permute_bytes("eplb") == pytest.approx((2048 * d / 8 + 2048 * 1.045063) * 7168 * 2, rel=1e-6)
    assert permute_bytes("learned") == pytest.approx((2048 * d / 8 + 2048 * 1.434833) * 7168 * 2, rel=1e-6)


def test_search_serve_keeps_the_balance_it_is_given(capsys):
    """`search --serve --expert-balance` reaches every plan it prices: for a coarse router both settings price
    alike; an unknown setting is refused by the parser (exit 2)."""
    args = ["search", "--serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "8", "--tp", "1",
            "--dp", "8", "--ep", "8", "--input-len", "256", "--output-len", "32", "--jobs", "1", "--slo-ttft", "5",
            "--slo-tpot", "0.2", "--json", "--no-disaggregation"]
    tops = []
    for balance in ("learned", "eplb"):
        assert main(args + ["--expert-balance", balance]) == 0
        tops.append(json.loads(capsys.readouterr().out)["ranked"][0]["output_tokens_per_s_per_gpu"])
    assert tops[0] == pytest.approx(tops[1], rel=1e-12)
    with pytest.raises(SystemExit) as exc:
        main(args + ["--expert-balance", "hot"])
    assert exc.value.code == 2


def test_the_moe_half_of_a_served_layer_by_hand():
    """DeepSeek-V3 (hidden 7,168, 256 experts) at 256 tokens a rank: add+norm moves 4·256·7,168·2 bytes, the
    top-k reads and writes 3·256·256 fp32 scores in 2 kernels; no tokens, no expert work."""
    scn = _deepseek("learned")
    f = Formats.of(scn.plan, True, scn.model)
    ops = {op.name: op for op in moe_token_ops(scn.model, scn.plan, f, 256.0)}
    assert ops["add_norm"].hbm_bytes == 4 * 256 * 7168 * 2
    assert ops["router_topk"].hbm_bytes == 3 * 256 * 256 * 4 and ops["router_topk"].kernels == 2
    assert ops["moe_unpermute"].hbm_bytes == ops["moe_permute"].hbm_bytes
    idle = {op.name for op in moe_token_ops(scn.model, scn.plan, f, 0.0)}
    assert not idle & {"moe_permute", "expert_up", "expert_act", "expert_down", "moe_unpermute"}
