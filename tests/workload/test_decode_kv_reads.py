"""Decode attention that reads a kv head's cache once per query head (masked multi-head attention): TensorRT-LLM 0.5/0.6
fetch it from HBM for every query head; 0.7-0.9, after 0.7.1's 'MMHA optimization for MQA and GQA', run it only for
the models their precompiled XQA kernels do not take, priced with a second memory roof — the cache comes from HBM
once and streams through L2 once per query head of the group (cost.roofline memory_time_s). Every expected value is
worked by hand in the docstring."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, device, model, system
from narrowpath.cost.roofline import l2_bw_bytes_per_s, memory_time_s
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.items import Op
from narrowpath.workload.serving import Formats, decode_attention_op, decode_shares_kv, kv_group_reads

XQA = {"groups": [1, 8], "head_dims": [128, 256]}
FALCON_180B = dict(name="falcon-180b", layers=80, hidden=14848, heads=232, kv_heads=8, ffn=59392, vocab=65024,
                   ffn_act="gelu", head_dim=64, parallel_attn_mlp=True, seq_len=2048)
MISTRAL_7B = dict(name="mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                  ffn_act="swiglu", seq_len=4096)


def test_the_xqa_kernels_of_trtllm_07_09_take_eight_query_heads_per_kv_head_at_width_128_or_256():
    """decoderXQARunner::shouldUse of the 0.7-0.9 line: Llama-2/3 70B (64 query heads over 8 kv heads, width 128)
    shares; Mistral 7B (32 over 8: 4 per kv head) and Falcon-180B (232 over 8: 29, width 64) do not; a multi-head
    model (1 per kv head) does; MLA always (one shared latent); with no shape list every model shares. At tp 16
    Llama 3 70B keeps 64/16 = 4 query heads and one replicated kv head a GPU: 4 per kv head, not taken."""
    llama70, mistral, falcon = model("llama3-70b"), model_from_dict(MISTRAL_7B), model_from_dict(FALCON_180B)
    p = ServingPlan()
    assert decode_shares_kv(llama70, p, XQA)
    assert not decode_shares_kv(mistral, p, XQA) and not decode_shares_kv(falcon, ServingPlan(tp=4), XQA)
    assert decode_shares_kv(model("gpt3-175b"), p, XQA)
    assert decode_shares_kv(falcon, p, None) and decode_shares_kv(mistral, p, None)
    assert not decode_shares_kv(llama70, ServingPlan(tp=16), XQA)
    # a shape list that names no group sizes (or no head widths) takes no grouped-query model
    assert not decode_shares_kv(llama70, p, {"head_dims": [128]}) and not decode_shares_kv(llama70, p, {"groups": [8]})
    assert kv_group_reads(falcon, ServingPlan(tp=4), False) == 29.0  # 58 query heads over 2 kv heads a GPU
    assert kv_group_reads(llama70, ServingPlan(tp=16), False) == 4.0
    assert kv_group_reads(falcon, ServingPlan(tp=4), True) == 1.0


def test_a_per_query_head_decode_reads_hbm_once_and_l2_once_per_query_head():
    """Mistral 7B, tp 1, BF16 KV: 2·8·128·2 = 4,096 B of KV per token and layer. 2 decodes over 3,000 context
    tokens read 12,288,000 B of KV at HBM, plus 2·32·(128 + 128)·2 = 32,768 B of queries and outputs; read per
    query head (4 per kv head) through L2, L2 streams 4 · 12,288,000 = 49,152,000 B; read per query head from HBM
    (the 0.5/0.6 kernel), HBM serves all 49,152,000 B and L2 is not charged; shared, nothing is charged to L2."""
    m, p = model_from_dict(MISTRAL_7B), ServingPlan()
    f = Formats.of(p, True, m)
    per_head = decode_attention_op(m, p, f, 2, 3000, kv_reads=4.0, reread_from="l2")
    from_hbm = decode_attention_op(m, p, f, 2, 3000, kv_reads=4.0)
    shared = decode_attention_op(m, p, f, 2, 3000)
    assert per_head.hbm_bytes == shared.hbm_bytes == 12_288_000 + 32_768
    assert (per_head.l2_bytes, shared.l2_bytes) == (49_152_000, 0.0)
    assert (from_hbm.hbm_bytes, from_hbm.l2_bytes) == (49_152_000 + 32_768, 0.0)
    assert per_head.flop == shared.flop == from_hbm.flop == 2 * 32 * 256 * 3000
    pair = decode_attention_op(m, p, f, 2, 3000, kv_reads=2.0, reread_from="l2")  # 2 query heads per kv head
    assert (pair.hbm_bytes, pair.l2_bytes) == (12_288_000 + 32_768, 24_576_000)


def test_the_l2_roof_binds_when_the_reads_times_hbm_bandwidth_exceed_l2s():
    """H100 SXM5: HBM 3.35 TB/s, L2 7.0 TB/s (catalog). An op with 1e9 B at HBM and 4e9 B through L2 takes
    max(1e9/3.35e12, 4e9/7.0e12) = 571.4 us of memory time (over the profile's bandwidth share); with 2e9 B through
    L2 the HBM roof binds (298.5 us). A device without an L2 level streams the re-reads at HBM bandwidth."""
    dev, cal = device("H100-SXM5-80GB"), calibration_for("H100-SXM5-80GB")
    eff = cal.vector_bw_efficiency
    op = Op("attn_decode", "flash", "fwd", 0.0, 1e9, "bf16", l2_bytes=4e9)
    assert memory_time_s(op, dev, cal) == pytest.approx(4e9 / 7.0e12 / eff, rel=1e-12)
    assert memory_time_s(dataclasses.replace(op, l2_bytes=2e9), dev, cal) == pytest.approx(1e9 / 3.35e12 / eff,
                                                                                             rel=1e-12)
    bare = dataclasses.replace(dev, levels=tuple(lv for lv in dev.levels if lv.name != "l2"))
    assert l2_bw_bytes_per_s(bare) == 3.35e12
    assert memory_time_s(op, bare, cal) == pytest.approx(4e9 / 3.35e12 / eff, rel=1e-12)


def _cost(framework: str, m, tp: int = 1) -> ServingCost:
    """The deployment on H200s with FP8 weights (the KV cache as the plan's default, BF16)."""
    load = Load(arrival="offline", input_tokens=128, output_tokens=64, num_requests=8)
    plan = ServingPlan(tp=tp, framework=framework, weight_precision="fp8")
    scn = ServingScenario(system=system("dgx-h200"), model=m, plan=plan, load=load, num_gpus=tp)
    scn, _ = resolve_limits(resolve_formats(scn, ()))
    return ServingCost(scn, 2048)


@pytest.mark.parametrize("framework, mdl, tp, reads", [
    ("TensorRT-LLM 0.8.0", "mistral", 1, 4.0), ("TensorRT-LLM 0.8.0", "falcon", 4, 29.0),
    ("TensorRT-LLM 0.8.0", "llama3-70b", 1, 1.0), ("TensorRT-LLM 0.17", "mistral", 1, 1.0),
    ("TensorRT-LLM 1.0", "falcon", 4, 1.0), ("TensorRT-LLM 0.5", "llama3-70b", 1, 8.0)])
def test_each_stack_reads_a_kv_head_as_its_generation_kernel_does(framework, mdl, tp, reads):
    """TensorRT-LLM 0.8 (xqa_shapes): Mistral 7B and Falcon-180B fall back to per-query-head reads (4 and 29 a kv
    head) through L2, Llama 3 70B runs XQA; 0.17's and 1.0's kernels take every shape; 0.5 reads per query head
    always (8 for Llama 3 70B), from HBM."""
    m = {"mistral": model_from_dict(MISTRAL_7B), "falcon": model_from_dict(FALCON_180B)}.get(mdl) or model(mdl)
    cost = _cost(framework, m, tp)
    assert cost.kv_reads == reads
    assert cost.kv_reread == ("hbm" if framework == "TensorRT-LLM 0.5" else "l2")


def test_the_iteration_prices_a_per_query_head_decode_on_its_l2_roof():
    """Falcon-180B, TensorRT-LLM 0.8, tp 4 on H200 (the plan's BF16 KV: 2·2·64·2 = 512 B per token and layer a GPU):
    64 decodes over 1,000 tokens each read 32.8 MB a layer from HBM and 29× that through L2, so each layer's core
    takes at least 29 · 32.768e6 / 7.0e12 = 135.8 us over the bandwidth share, about 29 · 4.8 / 7.0 = 19.9 times the
    memory time of the shared kernel; the iteration's attention is the roofline of that op over 80 layers."""
    from narrowpath.cost.roofline import op_time_s
    m = model_from_dict(FALCON_180B)
    cost = _cost("TensorRT-LLM 0.8.0", m, 4)
    (op, n), = cost.attention_ops(0, 64, 64_000, 0, 0, 0)
    assert n == 80 and op.l2_bytes == pytest.approx(29 * 64_000 * 512, rel=1e-12)
    eff = cost.cal.vector_bw_efficiency
    assert memory_time_s(op, cost.dev, cost.cal) == pytest.approx(29 * 64_000 * 512 / 7.0e12 / eff, rel=1e-12)
    shared = dataclasses.replace(op, l2_bytes=0.0)
    assert memory_time_s(op, cost.dev, cost.cal) / memory_time_s(shared, cost.dev, cost.cal) == pytest.approx(
        29 * 64_000 * 512 / 7.0e12 / (op.hbm_bytes / 4.8e12), rel=1e-12)
    assert cost.attention_s(0, 64, 64_000, 0, 0, 0) == pytest.approx(80 * op_time_s(op, cost.dev, cost.cal),
                                                                       rel=1e-12)


def test_the_accounts_charge_a_per_query_head_decode_to_l2_and_the_verdict_says_what_removes_it():
    """Mistral 7B on one H200 under TensorRT-LLM 0.8 (4 query heads per kv head, no XQA kernel): long decodes of 64
    sequences over ~2,000-token contexts are bound by streaming the cache through L2 four times (4 · 4.8 / 7.0 = 2.7
    times its HBM read), so the time split has an `l2: kv cache re-reads` row and no `hbm: kv cache` row; the L2
    level's bytes include those re-reads; the verdict's remedy names the engine's kernel. Under TensorRT-LLM 0.17
    the same deployment reads the cache once: no L2 row."""
    from narrowpath.analysis.serving_accounts import L2_REREAD_KEY, serving_accounts
    from narrowpath.analysis.serving_whatif import HOST_REMEDY
    from narrowpath.schedule.serving_run import simulate
    m = model_from_dict(MISTRAL_7B)
    load = Load(arrival="fixed-batch", batch_size=64, input_tokens=2048, output_tokens=128)

    def accounts(framework):
        plan = ServingPlan(framework=framework, weight_precision="fp8", kv_precision="fp8")
        scn = ServingScenario(system=system("dgx-h200"), model=m, plan=plan, load=load, num_gpus=1)
        return serving_accounts(simulate(scn))

    old, new = accounts("TensorRT-LLM 0.8.0"), accounts("TensorRT-LLM 0.17")
    assert old.time_split.get(L2_REREAD_KEY, 0.0) > 0 and "hbm: kv cache" not in old.time_split
    assert L2_REREAD_KEY not in new.time_split and new.time_split["hbm: kv cache"] > 0
    l2 = [{row.level: row.bytes_per_token for row in acc.levels}["l2"] for acc in (old, new)]
    assert l2[0] > l2[1]
    assert "4 times per token" in {row.item: row.note for row in old.distance}["kv_cache"]
    assert "through L2" in {row.item: row.note for row in old.distance}["kv_cache"]
    assert "query head its own thread block" in HOST_REMEDY[L2_REREAD_KEY]
