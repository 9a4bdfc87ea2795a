"""Golden work of one transformer layer: every forward op's FLOPs, bytes and saved bytes, and the backward rules,
worked out by hand for Llama-3 8B (h 4096, 32 heads of 128, 8 KV heads, SwiGLU f 14336, no dropout) on one
tensor-parallel rank of tp = 8 with sequence parallelism, micro-batch 1 × 8192 tokens, BF16, flash attention.

Legend: m = 8192 rows, t = 8, A = 2 bytes. A linear layer [m×k]·[k×n] costs 2mkn FLOPs and moves
m·k·A + k·n·A + m·n·A bytes (read input and weights, write output)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model
from narrowpath.spec import Plan
from narrowpath.workload.moe import activation_op, mlp_ops
from narrowpath.workload.ops import backward_ops, gemm
from narrowpath.workload.transformer import attention_ops, layer_forward_ops

PLAN = Plan(tp=8, sequence_parallel=True, mbs=1, gbs=1, precision="bf16")


@pytest.fixture(scope="module")
def ops():
    return {op.name: op for op in layer_forward_ops(model("llama3-8b"), PLAN, "flash")}


def test_layer_op_sequence(ops):
    """Megatron-Core's layer: norm, fused QKV, rotary, flash core, output projection, residual; norm, SwiGLU MLP
    (one GEMM for gate and up, the activation, down), residual (no dropout in Llama)."""
    assert list(ops) == ["ln1", "qkv", "rope", "flash_attn", "attn_proj", "residual_add", "ln2", "mlp_up",
                         "mlp_act", "mlp_down"]


def test_norms_rope_and_residual_bytes_by_hand(ops):
    """Sequence-parallel norm on m·h/t = 4,194,304 elements: read + write 16,777,216 B, keeps its input
    8,388,608 B. Rotary on Q and K of the rank: 8192·(32/8 + max(1, 8/8))·128 = 5,242,880 elements, read + write
    20,971,520 B. Residual add: read 2, write 1 tensor of m·h/t: 25,165,824 B."""
    assert (ops["ln1"].hbm_bytes, ops["ln1"].saved_bytes, ops["ln1"].kind) == (16_777_216, 8_388_608, "vector")
    assert ops["rope"].hbm_bytes == 20_971_520
    assert ops["residual_add"].hbm_bytes == 25_165_824 and ops["residual_add"].saved_bytes == 0


def test_gqa_qkv_projection_by_hand(ops):
    """Q of 32/8 heads and K, V of 8/8 heads: n = 512 + 2·128 = 768; 2·8192·4096·768 = 51,539,607,552 FLOPs;
    8192·4096·2 + 4096·768·2 + 8192·768·2 = 85,983,232 B; keeps its sequence-parallel input shard
    1024·4096·2 = 8,388,608 B (backward re-gathers it)."""
    qkv = ops["qkv"]
    assert (qkv.flop, qkv.hbm_bytes, qkv.saved_bytes) == (51_539_607_552, 85_983_232, 8_388_608)
    assert qkv.weight_bytes == 4096 * 768 * 2


def test_flash_attention_forward_by_hand(ops):
    """Causal flash attention (Dao 2023): scores and weighted sum 2·b·a_t·s·s·(d_qk + d_v) =
    2·1·4·8192²·256 = 137,438,953,472 FLOPs for the full matrix, of which the kernel computes the causal part plus
    the diagonal tiles, 0.5·(1 + 128/8192) = 0.5078125 → 69,793,218,560; model FLOPs count the full matrix.
    It reads Q (8192·4·128·2 = 8,388,608 B), K and V (2,097,152 B each) and writes O (8,388,608 B) and keeps
    them plus the fp32 log-sum-exp (4·4·8192 = 131,072 B): saved 21,102,592 B."""
    fa = ops["flash_attn"]
    assert fa.flop == 69_793_218_560 and fa.useful_flop == 137_438_953_472
    assert (fa.hbm_bytes, fa.saved_bytes) == (20_971_520, 21_102_592)
    assert ops["attn_proj"].saved_bytes == 0  # a 16-bit projection reads the O flash already keeps


def test_flash_attention_backward_is_two_and_a_half_forwards(ops):
    """FlashAttention-2 backward (Dao 2023 §3.1.2): five GEMM-like products against the forward's two, 2.5× the
    forward's FLOPs (174,483,046,400) and bytes (52,428,800); in model FLOPs twice the forward
    (2 × 137,438,953,472 = 274,877,906,944), the convention of Korthikanti et al. §6."""
    (bwd,) = backward_ops([ops["flash_attn"]], PLAN)
    assert bwd.flop == 174_483_046_400 and bwd.hbm_bytes == 52_428_800
    assert bwd.useful_flop == 274_877_906_944 and bwd.phase == "bwd" and bwd.kind == "flash"


def test_context_parallel_queries_see_every_key():
    """cp 2 (ring attention): a rank holds 8192/2 = 4096 queries, and each sees all 8192 keys: full
    2·32·4096·8192·256 = 549,755,813,888 FLOPs, causal with diagonal tiles 0.5·(1 + 128/8192) of them."""
    (fa,) = attention_ops(model("llama3-8b"), Plan(cp=2, gbs=1), "flash")
    assert fa.useful_flop == 549_755_813_888 and fa.flop == 549_755_813_888 * 0.5078125


def test_sliding_window_flash_computes_the_band_only():
    """A window layer (window 128, s 4096, 128-key tiles: n = 32) is still causal: query tile q touches key tiles
    q − 1 and q once the window has filled (k = ⌈127/128⌉ + 1 = 2) and tile 0 alone at the start, so 1 + 2·31 = 63
    of the 32² = 1,024 tiles: 2·8·4096·4096·256·63/1024 = 4,227,858,432 FLOPs (8 heads of 128, h 1024), executed
    and model alike, and 8·4096·4096·63/1024 = 8,257,536 exponentials."""
    from narrowpath.spec.model import Model
    m = Model(layers=2, hidden=1024, heads=8, vocab=1000, seq_len=4096, sliding_window=128, sliding_window_every=2)
    (fa,) = attention_ops(m, Plan(), "flash", window=True)
    assert fa.flop == fa.useful_flop == 4_227_858_432
    assert fa.exps == 8_257_536  # one exponential per score it computes


def test_a_wide_window_leaves_out_the_triangle_at_the_start_of_the_sequence():
    """Window 4096 at s 8192 (Mistral 7B v0.1's window, Jiang et al. 2023): n = 64 tiles, k = ⌈4095/128⌉ + 1 = 33,
    Σ_q min(q + 1, 33) = 33·64 − 33·32/2 = 1,584 of 4,096 tiles = 0.38672 of the score matrix — not the band's
    4,224/8,192 = 0.5156, which is a full causal layer's share; a window as long as the sequence is causal
    attention (0.5·(1 + 128/8192) = 0.50781)."""
    from narrowpath.workload.attention import causal_tile_fraction, window_tile_fraction
    assert window_tile_fraction(8192, 4096) == pytest.approx(1584 / 4096, rel=1e-12)
    assert window_tile_fraction(8192, 8191) == causal_tile_fraction(8192) == pytest.approx(0.5078125)
    fracs = [window_tile_fraction(8192, w) for w in (1, 64, 128, 1000, 4096, 8000, 8192)]
    assert fracs == sorted(fracs) and fracs[-1] == causal_tile_fraction(8192)


def test_the_flash_kernel_carries_its_head_width_into_backward_and_recompute():
    """GPT-OSS-style heads of 64 (h 2880 over 64 query heads of kv_channels 64): the forward, its backward and a
    recompute of it all carry head_dim 64, which cost.roofline rates at FlashAttention-3's measured 64-wide speed,
    and one exponential per score."""
    from narrowpath.spec.model import Model
    from narrowpath.workload.ops import as_phase, backward_ops
    m = Model(layers=2, hidden=2880, heads=64, kv_heads=8, head_dim=64, vocab=1000, seq_len=4096)
    (fa,) = attention_ops(m, Plan(), "flash")
    (bwd,) = backward_ops([fa])
    (again,) = as_phase([fa], "recompute")
    assert (fa.head_dim, bwd.head_dim, again.head_dim) == (64, 64, 64)
    assert bwd.exps == again.exps == fa.exps > 0  # the backward recomputes P = exp(S - LSE) once per score
    assert bwd.phase == "bwd" and again.phase == "recompute"


def test_unfused_core_without_dropout_keeps_the_softmax_output_only():
    """No dropout (Llama): the weighted sum reads the softmax output, which softmax already keeps; AV keeps
    nothing of its own."""
    core = {op.name: op for op in attention_ops(model("llama3-8b"), Plan(), "unfused")}
    assert "attn_dropout" not in core and core["attn_av"].saved_bytes == 0.0


def test_fp8_qkv_input_is_quantized_inside_the_norm():
    """Under FP8 the QKV GEMM's input is cast inside LayerNormLinear on the rank's sequence-parallel shard of its
    m·h input, row-wise, before the all-gather (TE gathers the FP8 buffer): 5 B per element (8192/8·4096·5 =
    20,971,520 B); its transpose is made from the gathered tensor, 1 B read + 1 B written per element of all 8192
    rows (67,108,864 B): 88,080,384 B in all, no kernel of its own counted. The MLP down projection's input comes
    from the activation, a quantize of its own over all its rows (8192·1792·6 B) in 4 launches: the amax zeroed, the
    amax, the scale, the cast (Transformer Engine's current-scaling quantizer)."""
    ops = {op.name: op for op in layer_forward_ops(model("llama3-8b"), Plan(tp=8, sequence_parallel=True, gbs=1,
                                                                           precision="fp8"), "flash")}
    assert (ops["qkv.quantize"].hbm_bytes, ops["qkv.quantize"].kernels) == (88_080_384, 0)
    assert ops["qkv.quantize"].transpose_bytes == 67_108_864
    assert ops["mlp_up.quantize"].kernels == 0  # the MLP's input: cast inside its norm too
    assert (ops["mlp_down.quantize"].hbm_bytes, ops["mlp_down.quantize"].kernels) == (8192 * 1792 * 6, 4)


def test_swiglu_mlp_has_three_matrices_and_a_three_tensor_activation(ops):
    """SwiGLU (Shazeer 2020; Llama): gate and up [h × f/t] each, in one GEMM of n = 2·14336/8 = 3584 (FLOPs
    2·8192·4096·3584 = 240,518,168,576), then down [f/t × h] (2·8192·1792·4096 = 120,259,084,288): three
    matrices. The fused SwiGLU kernel reads gate and up and writes their product: 3 tensors of
    8192·1792 = 14,680,064 elements = 88,080,384 B, and keeps both inputs: 58,720,256 B. The down projection keeps
    its full input 8192·1792·2 = 29,360,128 B; the up projection its sequence-parallel shard 8,388,608 B."""
    up, act, down = ops["mlp_up"], ops["mlp_act"], ops["mlp_down"]
    assert (up.flop, up.hbm_bytes, up.saved_bytes) == (240_518_168_576, 155_189_248, 8_388_608)
    assert (act.hbm_bytes, act.saved_bytes) == (88_080_384, 58_720_256)
    assert (down.flop, down.hbm_bytes, down.saved_bytes) == (120_259_084_288, 111_149_056, 29_360_128)


def test_gelu_activation_reads_and_writes_one_tensor():
    """GeLU / squared ReLU: read and write one tensor (2·E·A), keep its input (E·A); the up projection has one
    matrix (n = f/t). E = 1000 elements, A = 2: 4,000 B moved, 2,000 B saved; 1000 rows of a 64-wide model with
    f = 256, t = 1: up GEMM 2·1000·64·256 = 32,768,000 FLOPs."""
    m = dataclasses.replace(model("gpt-1.7b"), ffn_act="gelu")
    plan = Plan(precision="bf16")
    act = activation_op(m, plan, 1000, "act")
    assert (act.hbm_bytes, act.saved_bytes) == (4000, 2000)
    tiny = dataclasses.replace(m, hidden=64, heads=1, kv_heads=1, head_dim=64, ffn=256)
    up = mlp_ops(tiny, plan, 256, 1000, width_split=1)[0]
    assert up.flop == 32_768_000


def test_gemm_bytes_and_backward_by_hand():
    """[m×k]·[k×n] with m = 10, k = 20, n = 30, A = 2: 12,000 FLOPs; 400 + 1,200 + 600 = 2,200 B. Backward: the
    input gradient and the weight gradient, each one more GEMM of the same size (2× the forward FLOPs in total);
    the input gradient re-reads the weights, the weight gradient writes no weights."""
    g = gemm("g", "fwd", 10, 20, 30, "bf16", 2, 2)
    assert (g.flop, g.hbm_bytes, g.weight_bytes) == (12_000, 2_200, 1_200)
    dgrad, wgrad = backward_ops([g])
    assert (dgrad.name, wgrad.name, dgrad.kind, wgrad.kind) == ("g.dgrad", "g.wgrad", "matrix", "matrix")
    assert dgrad.flop == wgrad.flop == 12_000 and dgrad.weight_bytes == 1_200 and wgrad.weight_bytes == 0
    grouped = gemm("e", "fwd", 10, 20, 30, "bf16", 2, 2, groups=4)
    assert grouped.weight_bytes == 4 * 1_200 and grouped.kernels == 4  # four experts' weights, one GEMM each


def test_unfused_attention_core_by_hand():
    """Unfused core (Korthikanti §4): scores 2·S·d_qk with S = b·a_t·s·s_kv score elements, softmax reads and writes
    S·A, dropout S·A in, S·A + S (1-byte mask) out, AV 2·S·d_v. GPT 1.7B (24 heads of 96, s 2048), tp = 1, b = 1:
    S = 24·2048² = 100,663,296; scores 19,327,352,832 FLOPs, softmax 402,653,184 B, dropout 503,316,480 B.
    The scores GEMM reads Q and K (2048·24·96·2 = 9,437,184 B each) and writes S·2 B: 220,200,960 B; AV reads the
    probabilities S·2 and V and writes O (9,437,184 B each): 220,200,960 B. Backward of an element-wise kernel
    moves twice its bytes in at least one kernel."""
    core = {op.name: op for op in attention_ops(model("gpt-1.7b"), Plan(precision="fp16"), "unfused")}
    assert core["attn_scores"].flop == 19_327_352_832 == core["attn_av"].flop
    assert core["attn_scores"].hbm_bytes == 220_200_960 == core["attn_av"].hbm_bytes
    assert core["softmax"].hbm_bytes == 402_653_184
    assert core["attn_dropout"].hbm_bytes == 503_316_480
    (soft_bwd,) = backward_ops([core["softmax"]])
    assert (soft_bwd.hbm_bytes, soft_bwd.kernels, soft_bwd.phase) == (805_306_368, 1, "bwd")


def test_elementwise_backwards_follow_their_autograd_graphs(ops):
    """The norm's backward reads its input and the output's gradient and writes the input's (Transformer Engine's
    rmsnorm_bwd): 3·4,194,304·2 = 25,165,824 B, not twice the forward's 16,777,216. SwiGLU's reads the output's
    gradient (m·f/t = 14,680,064 elements) and both kept inputs and writes both inputs' gradients: 5·14,680,064·2 =
    146,800,640 B (twice the forward would be 176,160,768). The residual add passes its gradient through; where its
    input also fed the norm autograd sums the two gradients: read 2, write 1 of m·h/t, 25,165,824 B in one kernel
    (twice the forward: 50,331,648)."""
    (ln,) = backward_ops([ops["ln1"]], PLAN)
    (act,) = backward_ops([ops["mlp_act"]], PLAN)
    (res,) = backward_ops([ops["residual_add"]], PLAN)
    assert ln.hbm_bytes == 25_165_824
    assert act.hbm_bytes == 146_800_640 and ops["mlp_act"].hbm_bytes == 88_080_384
    assert (res.hbm_bytes, res.kernels) == (25_165_824, 1)


def test_biased_gpt3_style_backwards_keep_twice_the_forward():
    """GPT-3-style layer (dropout, GeLU, biased linears) on 1,000 rows × h 100, f 400, BF16: bias-dropout-add's
    backward masks the branch's gradient, reduces the bias's and sums the residual's with the norm's, GeLU's reads
    the output's gradient and its input, writes the input's and the up projection's bias gradient reads that again —
    4 tensors: both stay at twice their forwards, (3·2 + 1)·100,000·2 = 1,400,000 B and 2·2·2·400,000 = 3,200,000 B.
    A bias-free SwiGLU layer's are their autograd graphs' (above)."""
    from narrowpath.spec.parse import model_from_dict
    from narrowpath.workload.attention import residual_op
    m = model_from_dict(dict(name="g", layers=2, hidden=100, heads=4, ffn=400, vocab=1000, seq_len=1000,
                             ffn_act="gelu", dropout=True))
    plan = Plan(mbs=1, gbs=1, precision="bf16")
    (bda,) = backward_ops([residual_op(m, 100_000, 2, "bf16")], plan)
    (gelu,) = backward_ops([activation_op(m, plan, 400_000, "mlp_act")], plan)
    assert (bda.hbm_bytes, bda.kernels) == (1_400_000, 1)
    assert gelu.hbm_bytes == 3_200_000
