"""Values the seed-14 mutation sample (benchmarks/mutation.py --sample 400 --seed 14) found unguarded in the training
model's stages, each pinned by hand."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.model import Model
from narrowpath.workload.attention import attention_params
from narrowpath.workload.build import weight_transpose_op
from narrowpath.workload.counts import model_flop_per_token


def test_mla_without_a_query_latent_projects_queries_from_the_hidden_state():
    """DeepSeek-V3's MLA with q_lora_rank 0 (DeepSeek-V2-Lite's shape): the queries come straight from the hidden
    state, h · heads · d_qk = 7,168 · 128 · 192 parameters; keys and values keep their latent path, 7,168 · (512 + 64)
    + 512 (the kv norm) + 512 · 128 · (128 + 128); the output projection 128 · 128 · 7,168 — on one rank (tp 1)."""
    ds = model("deepseek-v3")
    lite = dataclasses.replace(ds, mla=dataclasses.replace(ds.mla, q_lora_rank=0))
    q = 7168 * 128 * 192
    kv = 7168 * (512 + 64) + 512 + 512 * 128 * (128 + 128)
    o = 128 * 128 * 7168
    assert attention_params(lite, Plan()) == q + kv + o
    assert attention_params(lite, Plan(tp=8, dp=1, gbs=1)) == q / 8 + kv - 512 * 128 * 256 + 512 * 16 * 256 + o / 8


def test_the_weight_transpose_is_element_wise_work():
    """The once-per-step column-wise copy of FP8 primary weights reads and writes each element once (2 B each way as
    2·elements bytes) on the vector units: a bandwidth-bound `vector` op with no FLOPs."""
    op = weight_transpose_op("optimizer", 1e9)
    assert (op.kind, op.flop, op.hbm_bytes, op.transpose_bytes) == ("vector", 0.0, 2e9, 2e9)



def test_a_multi_token_prediction_layer_costs_what_the_models_last_layer_costs():
    """A 4-layer model with sliding-window attention on the even layers (0 and 2) and one MTP depth: the MTP module
    repeats the LAST layer (3, full attention over s = 4,096 keys), so its layer adds the full-attention score FLOPs,
    not a window layer's (128 keys). Per token, forward: full − window = 2 · heads · (4,096 − 128) · (d_qk + d_v)
    = 2 · 8 · 3,968 · 256 = 16,252,928; the model FLOPs (3 × forward) of the MTP model exceed those of the same model
    whose MTP repeated a window layer by 3 × that."""
    kw = dict(layers=4, hidden=1024, heads=8, vocab=1000, seq_len=4096, sliding_window=128, sliding_window_every=2)
    m = Model(**kw, mtp_layers=1)
    assert not m.is_window_layer(3) and m.is_window_layer(2)
    h, V = 1024, 1000
    base = model_flop_per_token(Model(**kw))
    full_minus_window = 2 * 8 * (4096 - 128) * 256
    assert full_minus_window == 16_252_928
    extra = model_flop_per_token(m) - base
    # one full layer: 2 × attention parameters (4·h² for MHA) + scores over s keys + the MLP (the default GeLU MLP:
    # 2 matrices of h × 4h)
    assert (m.mlp_matrices, m.ffn) == (2, 4 * h)
    full_layer = 2 * (4 * h * h) + 2 * 8 * 4096 * 256 + 2 * 2 * h * 4 * h
    assert extra == pytest.approx(3 * (2 * 2 * h * h + full_layer + 2 * h * V))


def test_a_tied_embedding_is_synchronised_once_per_step_and_fully_exposed():
    """Tied input and output embeddings under pp 2: the first and the last stage each hold the vocab·h table and
    all-reduce its gradient once per step across the pipeline ends (Megatron's embedding group), after the last
    backward — nothing hides it: its exposed time is its whole time, and it appears among the step's transfers."""
    m = dataclasses.replace(model("llama3-8b"), tied_embeddings=True)
    s = Scenario(system=system("dgx-h100"), model=m, plan=Plan(tp=4, pp=2, gbs=4), num_gpus=8)
    p = predict(s)
    (tied,) = [t for t in p.transfers if t.name == "pp.tied_embedding_all_reduce"]
    assert tied.total_s > 0 and tied.exposed_s == tied.total_s
    assert tied.message_bytes == pytest.approx(m.vocab * m.hidden / 4 * 4)  # fp32 gradients of the tp shard


def test_no_tokens_means_no_routing_imbalance():
    """The busiest expert rank's excess over the mean is 1 + sqrt(2·ln(ep)/copies) (the max of ep balanced
    multinomial loads): with 64 token copies per rank over ep 8 it is 1 + sqrt(2·ln 8 / 64) = 1.2549; a rank that
    receives no copies has no busiest share to exceed (1.0, not a division by zero), nor does ep 1."""
    import math
    from narrowpath.workload.moe import routing_imbalance
    plan = Plan(dp=8, ep=8, gbs=8)
    assert routing_imbalance(plan, 64.0) == pytest.approx(1 + math.sqrt(2 * math.log(8) / 64))
    assert routing_imbalance(plan, 0.0) == 1.0
    assert routing_imbalance(Plan(), 64.0) == 1.0

