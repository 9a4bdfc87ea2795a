"""Parallel attention + MLP blocks in training (model.parallel_attn_mlp: GPT-J, PaLM, Falcon), priced as serving
already priced them: one norm, one residual add and one tensor-parallel reduction per layer pass."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.errors import SpecError
from narrowpath.spec.hf_config import model_from_hf_config
from narrowpath.spec.model import Model, MoE
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.catalog import system
from narrowpath.workload import transformer as T
from narrowpath.workload.build import layer_comm
from narrowpath.workload.counts import parameter_count
from narrowpath.workload.recompute import kept_bytes

GPTJ = dict(name="gpt-j-like", layers=28, hidden=4096, heads=16, ffn=16384, vocab=50400, seq_len=2048,
            ffn_act="gelu", norm="layernorm")


def _model(parallel: bool) -> Model:
    return Model(**GPTJ, parallel_attn_mlp=parallel)


def _scn(parallel: bool, **plan) -> Scenario:
    p = Plan(**{"tp": 4, "dp": 2, "mbs": 1, "gbs": 8, "precision": "bf16", **plan})
    return Scenario(name="gptj", system=system("dgx-h100"), model=_model(parallel), plan=p, num_gpus=p.tp * p.dp)


def _counts(xfers) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for tr, c in xfers:
        out[(tr.name, tr.phase)] = out.get((tr.name, tr.phase), 0.0) + c
    return out


def test_one_all_reduce_per_pass_without_sequence_parallelism():
    """tp 4, no sequence parallelism: a sequential layer all-reduces after attention and after the MLP, forward and
    backward (2 + 2); a parallel block sums both branches' outputs before one all-reduce and both input gradients
    before one (1 + 1). The message is the layer's activation either way: s·h·2 bytes = 2048·4096·2."""
    seq = _counts(layer_comm(_scn(False, sequence_parallel=False), "flash", False))
    par = _counts(layer_comm(_scn(True, sequence_parallel=False), "flash", False))
    assert seq == {("tp.all_reduce", "fwd"): 2.0, ("tp.all_reduce", "bwd"): 2.0}
    assert par == {("tp.all_reduce", "fwd"): 1.0, ("tp.all_reduce", "bwd"): 1.0}
    sizes = {tr.message_bytes for tr, _ in layer_comm(_scn(True, sequence_parallel=False), "flash", False)}
    assert sizes == {2048 * 4096 * 2}


def test_one_gather_scatter_pair_under_sequence_parallelism_and_full_recompute():
    """Sequence-parallel: one all-gather of the norm's output feeds both column-parallel GEMMs, one reduce-scatter
    takes their summed outputs, backward re-gathers once for the weight gradients; a full recompute gathers and
    scatters once more (a sequential layer: twice each)."""
    seq = _counts(layer_comm(_scn(False, sequence_parallel=True, recompute="full"), "flash", False))
    par = _counts(layer_comm(_scn(True, sequence_parallel=True, recompute="full"), "flash", False))
    assert par == {k: v / 2 for k, v in seq.items()}
    assert par[("tp.all_gather", "fwd")] == 1.0 and par[("tp.reduce_scatter", "recompute")] == 1.0
    assert par[("tp.wgrad_input_all_gather", "bwd")] == 1.0


def test_forward_ops_one_norm_one_three_way_residual():
    """The parallel block's forward: the sequential ops less ln2 and the attention's residual; its one residual
    reads the input and both branches' outputs and writes the sum (4 tensors of s·h bf16 elements), with a 1-byte
    dropout mask per branch kept (GPT-J-like: LayerNorm, GeLU, dropout on)."""
    s, p = _scn(False), _scn(True)
    seq = T.layer_forward_ops(s.model, s.plan, "flash")
    par = T.layer_forward_ops(p.model, p.plan, "flash")
    names = [o.name for o in par]
    assert names.count("ln1") == 1 and "ln2" not in names and names.count("bias_dropout_add") == 1
    assert [o.name for o in seq if o.name not in ("ln2", "bias_dropout_add")] == \
        [o.name for o in par if o.name != "bias_dropout_add"]
    E = 2048 * 4096  # tokens × hidden on a rank without sequence parallelism
    res = next(o for o in par if o.name == "bias_dropout_add")
    assert res.hbm_bytes == pytest.approx(E * (4 * 2 + 2)) and res.saved_bytes == pytest.approx(2 * E)


def test_the_norm_output_both_projections_read_is_kept_once():
    """BF16, tp 1: a sequential layer keeps ln2's input (E·2 bytes) and the MLP up-projection's input (ln2's
    output, E·2); a parallel block has no ln2, and its MLP up-projection reads the tensor qkv keeps: 2·E·2 bytes
    less (the dropout masks: one per branch either way)."""
    plan = Plan(tp=1, dp=8, mbs=1, gbs=8, precision="bf16")
    seq, par = _model(False), _model(True)
    E = 2048 * 4096
    k_seq = kept_bytes(T.layer_forward_ops(seq, plan, "flash"), seq, plan)
    k_par = kept_bytes(T.layer_forward_ops(par, plan, "flash"), par, plan)
    assert k_seq - k_par == pytest.approx(2 * E * 2)


def test_one_norm_in_the_parameter_counts():
    """A LayerNorm holds 2h (weight and bias): the parallel model has one per layer, 28·2·4096 fewer parameters;
    a rank of a tp-sharded layer holds h fewer (layer_params counts a norm as h)."""
    assert parameter_count(_model(False)) - parameter_count(_model(True)) == 28 * 2 * 4096
    plan = Plan(tp=4, dp=2, mbs=1, gbs=8)
    assert T.layer_params(_model(False), plan) - T.layer_params(_model(True), plan) == 4096


def test_experts_or_latent_attention_in_a_parallel_block_refused():
    """No engine prices a parallel block with routed experts, nor with MLA (whose sequence-parallel gather moves the
    latents, not the norm output the MLP would read): refused in one line naming the field."""
    with pytest.raises(SpecError, match="model.parallel_attn_mlp"):
        Model(**{**GPTJ, "ffn_act": "swiglu"}, parallel_attn_mlp=True, moe=MoE(num_experts=8, top_k=2,
                                                                                   expert_ffn=4096))
    from narrowpath.spec.model import MLA
    with pytest.raises(SpecError, match="multi-head latent attention"):
        Model(**GPTJ, parallel_attn_mlp=True, mla=MLA(kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                                                      qk_rope_head_dim=64, v_head_dim=128))


@pytest.mark.parametrize("cfg, kv", [
    ({"model_type": "falcon"}, 1),  # FalconConfig's multi_query defaults to True: one key/value head
    ({"model_type": "falcon", "multi_query": True, "num_kv_heads": 71}, 1),  # read only with the new architecture
    ({"model_type": "falcon", "multi_query": False}, 71),
    ({"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 1}, 1),
    ({"model_type": "gpt_bigcode", "multi_query": True}, 1),
    ({"model_type": "llama"}, 71),
])
def test_hf_key_value_heads_of_multi_query_configs(cfg, kv):
    """transformers' FalconAttention: num_kv_heads with the new decoder architecture (40B: 8), else one head under
    multi_query (7B); GPT-BigCode's multi_query is one head too. The reader took 71 and 128 query heads."""
    base = {"num_hidden_layers": 2, "hidden_size": 4544, "num_attention_heads": 71, "vocab_size": 65024}
    assert model_from_hf_config({**base, **cfg}, seq_len=128).kv_heads == kv


@pytest.mark.parametrize("cfg, parallel", [
    ({"model_type": "gptj"}, True),
    ({"model_type": "gpt_neox"}, True),  # GPTNeoXConfig's default use_parallel_residual is True
    ({"model_type": "gpt_neox", "use_parallel_residual": False}, False),
    ({"model_type": "falcon"}, True),  # FalconConfig's default parallel_attn is True
    ({"model_type": "falcon", "parallel_attn": False}, False),
    ({"model_type": "falcon", "parallel_attn": False, "new_decoder_architecture": True}, True),
    ({"model_type": "stablelm"}, False),
    ({"model_type": "llama"}, False),
])
def test_hf_configs_say_which_blocks_are_parallel(cfg, parallel):
    base = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000}
    assert model_from_hf_config({**base, **cfg}, seq_len=128).parallel_attn_mlp is parallel


def test_a_parallel_model_predicts_faster_with_less_memory():
    """End to end (predict): the same plan on the parallel model exposes half the tp traffic when none overlaps
    and keeps less memory."""
    from narrowpath.schedule.step import predict
    s = _scn(False, sequence_parallel=False, tp_comm_overlap=False)
    p = dataclasses.replace(s, model=_model(True))
    a, b = predict(s), predict(p)
    assert b.breakdown_s["exposed_tp_comm"] == pytest.approx(a.breakdown_s["exposed_tp_comm"] / 2, rel=0.02)
    assert b.memory.total_bytes < a.memory.total_bytes and b.step_time_s < a.step_time_s


def _no_dropout(parallel: bool) -> Model:
    """A Cohere-like parallel block: RMSNorm, SwiGLU, no dropout."""
    return Model(**{**GPTJ, "ffn_act": "swiglu", "norm": "rmsnorm", "ffn": 11008}, parallel_attn_mlp=parallel)


def test_without_dropout_the_residual_reads_three_tensors_and_keeps_no_mask():
    """No dropout: one plain residual add, read x, attention and MLP outputs, write y: 4·E·2 bytes, nothing kept;
    in the plan's format, as the sequential adds."""
    plan = Plan(tp=1, dp=8, mbs=1, gbs=8, precision="bf16")
    ops = T.layer_forward_ops(_no_dropout(True), plan, "flash")
    adds = [o for o in ops if o.name in ("residual_add", "bias_dropout_add")]
    assert len(adds) == 1 and adds[0].name == "residual_add" and adds[0].dtype == "bf16"
    E = 2048 * 4096
    assert adds[0].hbm_bytes == pytest.approx(4 * E * 2) and adds[0].saved_bytes == 0 and adds[0].phase == "fwd"


def test_layernorm_recompute_of_a_parallel_block_drops_what_both_projections_keep():
    """Selective recompute of the `layernorm` module: the one norm is a module of its own (it feeds two
    projections), so its output — the tensor qkv and the MLP up-projection keep, E·2 bytes held once — is dropped
    and rebuilt; ln1 runs again before backward."""
    from narrowpath.workload.recompute import recompute_ops
    m = _no_dropout(True)
    none = Plan(tp=1, dp=8, mbs=1, gbs=8, precision="bf16")
    ln = dataclasses.replace(none, recompute="selective", recompute_modules=("layernorm",))
    ops = T.layer_forward_ops(m, none, "flash")
    E = 2048 * 4096
    assert kept_bytes(ops, m, none) - kept_bytes(ops, m, ln) == pytest.approx(E * 2)
    assert [o.name for o in recompute_ops(ops, m, ln, "flash", False)] == ["ln1"]
