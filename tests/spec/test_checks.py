"""Bad input: every consistency check gives one clear message naming the field and the values."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.errors import CatalogError, SpecError
from narrowpath.spec import Model, Plan, Scenario
from narrowpath.spec.hf_config import model_from_hf_config


def scn(model_id="gpt-18.4b", system_id="dgx-a100", num_gpus=None, **kw):
    plan = Plan(**kw)
    return Scenario(system=system(system_id), model=model(model_id), plan=plan, num_gpus=num_gpus or plan.num_gpus)


@pytest.mark.parametrize("kw, field, fragment", [
    (dict(tp=8, dp=2, num_gpus=8, gbs=2), "plan", "does not equal num_gpus 8"),
    (dict(tp=5, gbs=1), "plan.tp", "does not divide model.heads 48"),
    (dict(pp=41, gbs=1), "plan.pp", "exceeds model.layers 40"),
    (dict(pp=4, vpp=11, gbs=4), "plan.pp", "exceeds model.layers 40"),
    (dict(cp=3, gbs=1), "plan.cp", "does not divide model.seq_len 2048"),
    (dict(ep=2, dp=2, gbs=2), "plan.ep", "needs an MoE model"),
    (dict(pp=4, vpp=2, mbs=1, gbs=6), "plan.gbs", "divisible by pp 4"),
])
def test_consistency_errors_name_field_and_values(kw, field, fragment):
    with pytest.raises(SpecError) as exc:
        scn(**kw)
    assert exc.value.field == field
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("kw, field", [
    (dict(dp=4, mbs=3, gbs=8), "plan.gbs"),
    (dict(zero_stage=4), "plan.zero_stage"),
    (dict(recompute="some"), "plan.recompute"),
    (dict(precision="int4"), "plan.precision"),
    (dict(tp=0), "plan.tp"),
    (dict(vpp=2), "plan.vpp"),
    (dict(sequence_parallel=True), "plan.sequence_parallel"),
    (dict(placement=("tp", "dp", "pp")), "plan.placement"),
])
def test_plan_field_checks(kw, field):
    with pytest.raises(SpecError) as exc:
        Plan(**kw)
    assert exc.value.field == field


def test_kv_heads_rules():
    with pytest.raises(SpecError, match="model.kv_heads"):
        Model(layers=2, hidden=64, heads=8, kv_heads=3, vocab=10, seq_len=8)
    with pytest.raises(SpecError, match="exceeds heads"):
        Model(layers=2, hidden=64, heads=8, kv_heads=16, vocab=10, seq_len=8)
    gqa = Model(layers=2, hidden=96, heads=12, kv_heads=4, vocab=10, seq_len=8)
    with pytest.raises(SpecError, match="tp 6 does not divide model.kv_heads 4"):
        Scenario(system=system("dgx-a100"), model=gqa, plan=Plan(tp=6, gbs=1), num_gpus=6)
    # training splits the key/value heads over tp (Megatron-Core divides num_query_groups by tp): tp 2 of 4 heads
    # is fine, tp 12 over 4 heads is refused — a serving plan replicates them instead (spec.serving)
    Scenario(system=system("dgx-a100"), model=gqa, plan=Plan(tp=2, gbs=1), num_gpus=2)
    with pytest.raises(SpecError, match="tp 12 does not divide model.kv_heads 4") as e:
        Scenario(system=system("gb200-nvl72"), model=gqa, plan=Plan(tp=12, gbs=1), num_gpus=12)
    assert e.value.field == "plan.tp"


def test_unknown_field_suggests_nearest():
    with pytest.raises(SpecError) as exc:
        scenario_from_dict({"system": "dgx-a100", "model": {"layers": 2, "hiden": 64, "heads": 2, "vocab": 10,
                                                            "seq_len": 8}, "plan": {}})
    assert exc.value.field == "model.hiden" and "did you mean 'hidden'" in str(exc.value)


def test_negative_and_wrong_types():
    with pytest.raises(SpecError, match="model.layers: must be >= 1, got -3"):
        Model(layers=-3, hidden=64, heads=2, vocab=10, seq_len=8)
    with pytest.raises(SpecError, match="model.hidden: must be an integer"):
        Model(layers=3, hidden="big", heads=2, vocab=10, seq_len=8)


def test_unknown_catalog_id_lists_nearest():
    with pytest.raises(CatalogError, match="nearest: .*H100-SXM5-80GB"):
        from narrowpath.catalog import device
        device("H100-SXM5")
    with pytest.raises(CatalogError, match="unknown scenario"):
        load_scenario("no-such-scenario")


def test_specs_are_immutable():
    p = Plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.tp = 2


@pytest.mark.parametrize("cfg, expect", [
    ({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
      "rms_norm_eps": 1e-5, "hidden_act": "silu"}, dict(kv_heads=8, ffn_act="swiglu", norm="rmsnorm", ffn=14336)),
    ({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
      "rms_norm_eps": 1e-5}, dict(kv_heads=8, ffn_act="swiglu", seq_len=4096)),
    ({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
      "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768,
      "rms_norm_eps": 1e-6, "tie_word_embeddings": False}, dict(kv_heads=4, layers=28, tied_embeddings=False)),
    ({"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144, "num_attention_heads": 64,
      "intermediate_size": 24576, "vocab_size": 50432, "max_position_embeddings": 2048, "hidden_act": "gelu_fast"},
     dict(kv_heads=64, ffn_act="gelu", norm="layernorm")),
    ({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024,
      "activation_function": "gelu_new"}, dict(ffn=3072, tied_embeddings=True, seq_len=1024)),
    ({"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
      "num_experts_per_tok": 2, "rms_norm_eps": 1e-5}, dict(kv_heads=8)),
])
def test_hf_config_key_styles(cfg, expect):
    m = model_from_hf_config(cfg, seq_len=expect.get("seq_len", 1024))
    for k, v in expect.items():
        assert getattr(m, k) == v, k
    if cfg["model_type"] == "mixtral":
        assert m.moe.num_experts == 8 and m.moe.top_k == 2


def test_hf_config_missing_key_names_it():
    with pytest.raises(SpecError, match="config.json.num_hidden_layers"):
        model_from_hf_config({"model_type": "llama", "hidden_size": 64})


def test_hf_config_bad_values_name_the_key():
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": "abc",
           "vocab_size": 32000}
    with pytest.raises(SpecError) as exc:
        model_from_hf_config(cfg)
    assert exc.value.field == "config.json.num_hidden_layers"


def test_hf_qwen1_and_deepseek_key_styles():
    qwen1 = {"model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016, "num_attention_heads": 32,
             "num_hidden_layers": 32, "vocab_size": 151936, "seq_length": 8192, "layer_norm_epsilon": 1e-6}
    m = model_from_hf_config(qwen1)
    assert (m.ffn, m.ffn_act, m.norm, m.seq_len) == (11008, "swiglu", "rmsnorm", 8192)
    ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
          "num_hidden_layers": 61, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
          "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "vocab_size": 129280,
          "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
          "v_head_dim": 128, "n_group": 8, "topk_group": 4, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-6,
          "max_position_embeddings": 163840}  # the position limit is the served context limit, not the sequence
    assert model_from_hf_config(ds, seq_len=2048) == model("deepseek-v3").__class__(**{**_fields(model("deepseek-v3")),
                                                                           "name": "deepseek_v3", "seq_len": 2048})


def test_moe_capacity_factor_must_be_a_number():
    with pytest.raises(SpecError) as exc:
        scenario_from_dict({"system": "dgx-h100", "plan": {"gbs": 1},
                            "model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16,
                                      "moe": {"num_experts": 4, "top_k": 2, "expert_ffn": 64,
                                              "capacity_factor": "x"}}})
    assert exc.value.field == "model.moe.capacity_factor"


_MIXTRAL_FLAT = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 32000,
                 "seq_len": 4096, "experts": 8, "top_k": 2}


@pytest.mark.parametrize("block", [
    {"experts": 8, "top_k": 2},  # the corpus spelling, the expert width left to the model's ffn
    {"experts": 8, "top_k": 2, "ffn": 14336},
    {"num_experts": 8, "top_k": 2, "expert_ffn": 14336},  # the spec's own spelling
    {"num_experts": 8, "top_k": 2},
])
def test_nested_moe_block_reads_like_the_flat_corpus_form(block):
    """shared/validation/README.md: "a `moe` block appears only for MoE models" — a case may nest the MoE fields in
    either spelling; it is the same model as the flat corpus form (Mixtral 8x7B: one expert is 14,336 wide)."""
    flat = _MIXTRAL_FLAT
    nested = {k: v for k, v in flat.items() if k not in ("experts", "top_k")} | {"moe": block}
    from narrowpath.spec.parse import model_from_dict
    assert model_from_dict(nested) == model_from_dict(flat)
    assert model_from_dict(nested).moe.expert_ffn == 14336


_DEEPSEEK_FLAT = {"layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128, "ffn": 2048, "dense_ffn": 18432,
                  "vocab": 129280, "seq_len": 4096, "experts": 256, "top_k": 8, "shared_experts": 1,
                  "dense_layers": 3}


@pytest.mark.parametrize("nested", [
    {"dense_ffn": 18432, "ffn": 2048, "moe": {"experts": 256, "top_k": 8, "shared_experts": 1, "dense_layers": 3}},
    {"ffn": 2048, "moe": {"experts": 256, "top_k": 8, "shared_experts": 1, "dense_layers": 3, "dense_ffn": 18432}},
    {"ffn": 18432, "moe": {"num_experts": 256, "top_k": 8, "shared_experts": 1, "first_dense_layers": 3,
                           "expert_ffn": 2048}},
    {"dense_ffn": 18432, "ffn": 2048, "dense_layers": 3, "shared_experts": 1, "moe": {"experts": 256, "top_k": 8}},
])
def test_a_nested_block_with_dense_layers_reads_like_the_flat_form(nested):
    """DeepSeek-V3 (3 dense layers of 18,432, experts of 2,048, one shared expert) in the nested spellings is the
    flat corpus model: `ffn` beside `dense_ffn` is one expert's width, as in the flat form."""
    from narrowpath.spec.parse import model_from_dict
    base = {k: v for k, v in _DEEPSEEK_FLAT.items() if k not in ("experts", "top_k", "shared_experts",
                                                                   "dense_layers", "ffn", "dense_ffn")}
    assert model_from_dict(base | nested) == model_from_dict(_DEEPSEEK_FLAT)


def test_a_block_whose_expert_width_could_differ_from_ffn_must_state_it():
    """With leading dense layers (or shared experts, or interleaved MoE layers) `ffn` is the dense width: a block
    without its own expert width is refused rather than given experts 9x too wide."""
    from narrowpath.spec.parse import model_from_dict
    base = {k: v for k, v in _DEEPSEEK_FLAT.items() if k not in ("experts", "top_k", "shared_experts",
                                                                   "dense_layers", "ffn", "dense_ffn")}
    with pytest.raises(SpecError) as exc:
        model_from_dict(base | {"ffn": 18432, "moe": {"num_experts": 256, "top_k": 8, "first_dense_layers": 3}})
    assert exc.value.field == "model.moe.expert_ffn"


@pytest.mark.parametrize("block, field", [
    ({"experts": 8, "num_experts": 8, "top_k": 2}, "model.moe.experts"),
    ({"experts": 8, "top_k": 2, "ffn": 64, "expert_ffn": 64}, "model.moe.ffn"),
    ({"experts": 8, "top_k": 2, "dense_layers": 1, "first_dense_layers": 1}, "model.moe.dense_layers"),
    ({"experts": 8, "top_k": 9}, "model.moe.top_k"),
])
def test_nested_moe_block_twice_spelled_or_bad_names_the_field(block, field):
    from narrowpath.spec.parse import model_from_dict
    with pytest.raises(SpecError) as exc:
        model_from_dict({k: v for k, v in _MIXTRAL_FLAT.items() if k not in ("experts", "top_k")} | {"moe": block})
    assert exc.value.field == field


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
