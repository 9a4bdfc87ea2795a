"""Golden multi-head latent attention, multi-token prediction and the embedding/output work by hand.

MLA as Megatron-Core's MLASelfAttention runs it for training (DeepSeek-V3 §2.1.1): the down-projections to the
query latent (1536) and to the joint KV latent plus the shared rotary key (512 + 64) are replicated on every tensor-
parallel rank; the latents are normed and up-projected per head (column-parallel); the core is multi-head
attention with query/key width 128 + 64 = 192 and value width 128. DeepSeek-V3 shapes, tp 8 with SP, micro-batch
1 × 4096 tokens (m = 4096 rows, 128/8 = 16 heads a rank), BF16, A = 2."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.attention import attention_block_ops, attention_params, kv_pair_width_per_rank
from narrowpath.workload.build import _embedding_work, build_workload, mtp_params
from tests.workload.golden_models import deepseek_v3

TP8 = Plan(tp=8, sequence_parallel=True)


@pytest.fixture(scope="module")
def mla_ops():
    return {op.name: op for op in attention_block_ops(deepseek_v3(), TP8, "flash")}


def test_mla_projections_by_hand(mla_ops):
    """tp 8 with SP, 4096 tokens, 512 on each rank. The duplicated down-projections run on the rank's shard
    (Megatron-Core MLASelfAttention: TELinear, parallel_mode 'duplicated'): q_down [512 × 7168]·[7168 × 1536]:
    11,274,289,152 FLOPs, kv_down [512 × 7168]·[7168 × 576]: 4,227,858,432, each keeping its input shard
    512·7168·2 = 7,340,032 B; their latent norms read and write 512·1536 and 512·512 elements (3,145,728 and
    1,048,576 B). The column-parallel up-projections read the gathered latents of all 4096 tokens: q_up
    [4096 × 1536]·[1536 × 16·192]: 38,654,705,664, kv_up [4096 × 512]·[512 × 16·(128 + 128)]: 17,179,869,184,
    keeping their shards (512·1536·2 and 512·512·2 B) and re-gathering for the weight gradient; output projection
    [4096 × 16·128]·[2048 × 7168]: 120,259,084,288. Rotary on 16 query heads and the one shared key head of 64:
    4096·17·64 elements, 17,825,792 B."""
    o = mla_ops
    assert [o[n].flop for n in ("q_down", "q_up", "kv_down", "kv_up", "attn_proj")] == [
        11_274_289_152, 38_654_705_664, 4_227_858_432, 17_179_869_184, 120_259_084_288]
    assert o["q_down"].saved_bytes == o["kv_down"].saved_bytes == 7_340_032
    assert o["q_up"].saved_bytes == 512 * 1536 * 2 and o["kv_up"].saved_bytes == 512 * 512 * 2
    assert (o["q_norm"].hbm_bytes, o["kv_norm"].hbm_bytes, o["rope"].hbm_bytes) == (3_145_728, 1_048_576,
                                                                                    17_825_792)


def test_mla_gathers_its_latents_not_its_input():
    """Under sequence parallelism the attention block of DeepSeek-V3 all-gathers the query latent (1,536), the
    key/value latent (512) and the shared rotary key (64) of every token, not its 7,168-wide input: tp 8, 4096
    tokens, 16 bit: 4096·2112·2 = 17,301,504 B per gather (the input's would be 58,720,256 B); under FP8 the two
    latents move in their 1-byte GEMM format: 4096·(2048 + 64·2) = 8,912,896 B. The output projection's
    reduce-scatter is the 7,168-wide hidden state."""
    from narrowpath.workload.build import layer_comm
    for precision, gathered in (("bf16", 17_301_504), ("fp8", 8_912_896)):
        plan = Plan(tp=8, sequence_parallel=True, precision=precision)
        scn = Scenario(system=system("dgx-h100"), model=deepseek_v3(), plan=plan, num_gpus=8)
        fwd = [(t.name, t.message_bytes, c) for t, c in layer_comm(scn, "flash", False)
               if t.phase == "fwd" and t.axis == "tp"]
        assert ("tp.all_gather", gathered, 1.0) in fwd and ("tp.reduce_scatter", 4096 * 7168 * 2, 2.0) in fwd


def test_mla_without_a_query_latent_projects_queries_directly():
    """q_lora_rank 0 (DeepSeek-V2-Lite): one column-parallel q_proj [4096 × 7168]·[7168 × 16·192] =
    180,388,626,432 FLOPs, keeping its SP input shard (512 rows): 7,340,032 B; no query norm."""
    import dataclasses
    m = deepseek_v3()
    m = dataclasses.replace(m, mla=dataclasses.replace(m.mla, q_lora_rank=0))
    ops = {op.name: op for op in attention_block_ops(m, TP8, "flash")}
    assert (ops["q_proj"].flop, ops["q_proj"].saved_bytes) == (180_388_626_432, 7_340_032)
    assert "q_norm" not in ops and "q_down" not in ops


def test_mla_under_fp8_quantizes_the_latents_inside_their_norms():
    """FP8: the up-projections read the normed latents, quantized inside the norm kernel (no kernel of their own)
    row-wise on the rank's shard before the gather and transposed after it over all rows: kv_up 512·512·5 +
    2·4096·512 = 5,505,024 B; the output projection's input comes from attention, its own 4-launch quantize
    (4096·2048·6 = 50,331,648 B: the amax zeroed, the amax, the scale, the cast)."""
    ops = {op.name: op for op in attention_block_ops(deepseek_v3(), Plan(tp=8, sequence_parallel=True,
                                                                          precision="fp8"), "flash")}
    assert (ops["kv_up.quantize"].hbm_bytes, ops["kv_up.quantize"].kernels) == (5_505_024, 0)
    assert ops["q_up.quantize"].kernels == 0
    assert (ops["attn_proj.quantize"].hbm_bytes, ops["attn_proj.quantize"].kernels) == (50_331_648, 4)
    # without a query latent the direct q_proj reads the layer's input norm, quantized there too (mutation seed 11),
    # row-wise on the rank's sequence-parallel shard before the gather (4096/8·7168·5 = 18,350,080 B) and transposed
    # after it over all rows (2·4096·7168 = 58,720,256 B): 77,070,336 B, no kernel of its own
    import dataclasses
    lite = dataclasses.replace(deepseek_v3(), mla=dataclasses.replace(deepseek_v3().mla, q_lora_rank=0))
    ops = {op.name: op for op in attention_block_ops(lite, Plan(tp=8, sequence_parallel=True, precision="fp8"),
                                                     "flash")}
    assert (ops["q_proj.quantize"].hbm_bytes, ops["q_proj.quantize"].kernels) == (77_070_336, 0)


def test_mla_flash_core_by_hand(mla_ops):
    """16 heads, d_qk 192, d_v 128, s 4096: full scores + weighted sum 2·16·4096²·(192 + 128) = 171,798,691,840
    FLOPs, causal with diagonal tiles 0.5·(1 + 128/4096) = 0.515625 → 88,583,700,480. Q and K 4096·16·192·2 =
    25,165,824 B each, V and O 4096·16·128·2 = 16,777,216 B each (every head has its own K and V after the
    up-projection): 83,886,080 B; saved with the fp32 LSE (4·16·4096): 84,148,224 B. A tp rank's K + V width is
    16·(192 + 128) = 5,120."""
    fa = mla_ops["flash_attn"]
    assert (fa.useful_flop, fa.flop, fa.hbm_bytes, fa.saved_bytes) == (171_798_691_840, 88_583_700_480,
                                                                       83_886_080, 84_148_224)
    assert kv_pair_width_per_rank(deepseek_v3(), 8) == 5_120
    assert fa.head_dim == 192  # the kernel's tiles hold d_qk (cost.roofline.flash_head_dim_rate)
    assert fa.exps == 16 * 4096 * 4096 * 0.515625 == 138_412_032  # one exponential per computed score


def test_mla_parameters_per_rank_by_hand():
    """Replicated: W_DQ 7168·1536 + its norm 1536, W_DKV+W_KR 7168·576 + its norm 512; split over 8: W_UQ
    1536·128·192/8 = 4,718,592, W_UKV 512·128·256/8 = 2,097,152, W_O 128·128·7168/8 = 14,680,064:
    11,011,584 + 4,718,592 + 4,129,280 + 2,097,152 + 14,680,064 = 36,636,672."""
    assert attention_params(deepseek_v3(), TP8) == 36_636_672


def test_mtp_module_work_and_parameters_by_hand():
    """One MTP module (DeepSeek-V3 §2.2) on the last stage, tp 1, ep 8, 4096 tokens: norms of the hidden state and
    of the shifted embedding, 2 × (read + write) of 4096·7168·2 B = 234,881,024 B; the projection of their
    concatenation [4096 × 14336]·[14336 × 7168]: 841,813,590,016 FLOPs; one MoE layer. The output layer and loss
    run once more for it (2 heads). Parameters: 2·7168² + 2·7168 + one MoE layer on ep 8 (attention 187,105,280 +
    latent norms 2,048 + norms 14,336 + 32 local experts × 44,040,192 + shared 44,040,192 + router 1,835,008):
    1,745,057,792."""
    plan = Plan(dp=8, ep=8, gbs=8)
    scn = Scenario(system=system("dgx-h100"), model=deepseek_v3(), plan=plan, num_gpus=8)
    ops = {(op.name, op.phase): (op, c) for op, c in build_workload(scn, "flash").stages[0].ops}
    norms, n = ops[("mtp_norms", "fwd")]
    assert (norms.hbm_bytes, n) == (234_881_024, 1.0)
    assert ops[("mtp_proj", "fwd")][0].flop == 841_813_590_016
    assert ops[("logits", "fwd")][1] == 2.0 and ops[("cross_entropy", "bwd")][1] == 2.0
    assert mtp_params(scn) == 1_745_057_792


def test_mtp_sits_on_the_last_pipeline_stage_only():
    """pp 2: the MTP module's parameters (1,745,057,792 on ep 8, of which its 32 local experts 1,409,286,144) and
    its activations are on the last stage; the first stage holds none of them."""
    from narrowpath.cost.memory import stage_memory
    base = Plan(pp=2, dp=8, ep=8, gbs=16)
    with_mtp = Scenario(system=system("dgx-h100"), model=deepseek_v3(), plan=base, num_gpus=16)
    without = Scenario(system=system("dgx-h100"), model=deepseek_v3(mtp_layers=0), plan=base, num_gpus=16)
    a, b = build_workload(with_mtp, "flash"), build_workload(without, "flash")
    assert a.stages[0].params == b.stages[0].params and a.stages[0].expert_params == b.stages[0].expert_params
    assert a.stages[1].params - b.stages[1].params == 1_745_057_792
    assert a.stages[1].expert_params - b.stages[1].expert_params == 1_409_286_144
    from narrowpath.cost.memory import in_flight_microbatches, layer_activation_bytes
    ma, mb = stage_memory(with_mtp, a, "flash"), stage_memory(without, b, "flash")
    assert ma[0].items["activations"] == mb[0].items["activations"]
    moe_layer = layer_activation_bytes(with_mtp, "flash", moe_layer=True)  # the MTP block is an MoE layer
    assert ma[1].items["activations"] - mb[1].items["activations"] == pytest.approx(
        in_flight_microbatches(1, with_mtp) * moe_layer)


def test_embedding_and_output_work_by_hand():
    """Llama-3 8B, tp 2 with SP, 8192 tokens (E = 8192·4096): lookup reads and writes E·2 B twice = 134,217,728 B,
    its gradient 3·E·2 = 201,326,592 B; the vocab-parallel embedding output is reduce-scattered into the SP region
    (and all-gathered back in backward); the dense weight gradient of its vocabulary shard (64,128 × 4,096) written
    and added into the main gradient, 2·2 + 2·4 B a weight in FP32 gradients = 3,152,019,456 B. Last stage: final
    norm on E/2 elements 67,108,864 B forward, 3 tensors of them backward (100,663,296 B); logits
    [8192 × 4096]·[4096 × 64128] = 4,303,557,230,592 FLOPs kept in BF16; fp32 cross entropy 16 B per logit forward
    (8192·64128 logits: 8,405,385,216 B) and 12 B backward (6,304,038,912 B); its max/sum statistics all-reduced
    over tp (3·8192·4 = 98,304 B); the logits' input all-gathered, re-gathered in backward for the weight gradient
    and its gradient reduce-scattered (those two behind the output layer's GEMMs)."""
    plan = Plan(tp=2, sequence_parallel=True, precision="fp8")
    scn = Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, num_gpus=2)
    ops, xf = _embedding_work(scn, True, True)
    by = {(op.name, op.phase): op for op, _ in ops}
    assert by[("embedding_lookup", "fwd")].hbm_bytes == 134_217_728
    assert by[("embedding_grad", "bwd")].hbm_bytes == 201_326_592
    assert by[("embedding_wgrad_accumulate", "bwd")].hbm_bytes == 3_152_019_456
    assert by[("final_norm", "fwd")].hbm_bytes == 67_108_864 and by[("final_norm", "bwd")].hbm_bytes == 100_663_296
    assert (by[("logits", "fwd")].flop, by[("logits", "fwd")].dtype) == (4_303_557_230_592, "bf16")
    assert by[("cross_entropy", "fwd")].hbm_bytes == 8_405_385_216
    assert by[("cross_entropy", "bwd")].hbm_bytes == 6_304_038_912
    act = 8192 * 4096 * 2
    assert [(t.name, t.op, t.phase, t.message_bytes, c) for t, c in xf] == [
        ("tp.embedding_reduce_scatter", "reduce_scatter", "fwd", act, 1.0),
        ("tp.embedding_grad_all_gather", "all_gather", "bwd", act, 1.0),
        ("tp.cross_entropy_stats", "all_reduce", "fwd", 98_304, 1.0),
        ("tp.logits_all_gather", "all_gather", "fwd", act, 1.0),
        ("tp.logits_input_all_gather", "all_gather", "bwd", act, 1.0),
        ("tp.logits_grad_reduce_scatter", "reduce_scatter", "bwd", act, 1.0)]
    assert [t.overlappable for t, _ in xf] == [False, False, False, False, True, True]


def test_mla_without_a_query_latent_counts_its_direct_query_projection():
    """Parameters of one MLA layer with q_lora_rank 0 (DeepSeek-V2-Lite's form) on DeepSeek-V3's shapes: q_proj
    h·a·qk_head_dim = 7168·128·192 = 176,160,768; kv_down h·(512 + 64) = 4,128,768; kv_up 512·128·(128 + 128) =
    16,777,216; o_proj a·v_head_dim·h = 128·128·7168 = 117,440,512: 314,507,264 in all."""
    import dataclasses
    from narrowpath.workload.counts import attention_parameters
    m = deepseek_v3()
    m = dataclasses.replace(m, mla=dataclasses.replace(m.mla, q_lora_rank=0))
    assert attention_parameters(m) == 314_507_264


def test_recomputed_mla_up_projections_gather_their_latents_again():
    """`mla_up_proj` re-runs MLA's column-parallel up-projections before backward; under sequence parallelism they
    read the gathered latents, so the recompute pass all-gathers them again (tp 8, 4096 tokens, 16 bit:
    4096·2112·2 = 17,301,504 B, once per layer and micro-batch) — and no reduce-scatter, since the output projection
    is not re-run. Without the module, no recompute-phase gather."""
    from narrowpath.workload.build import layer_comm
    for mods, want in ((("mla_up_proj",), [("tp.all_gather", 17_301_504, 1.0)]), (("core_attn",), [])):
        plan = Plan(tp=8, sequence_parallel=True, recompute="selective", recompute_modules=mods)
        scn = Scenario(system=system("dgx-h100"), model=deepseek_v3(), plan=plan, num_gpus=8)
        again = [(t.name, t.message_bytes, c) for t, c in layer_comm(scn, "flash", False)
                 if t.phase == "recompute" and t.axis == "tp"]
        assert again == want, mods
