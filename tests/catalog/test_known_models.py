"""A validation case's model recognised as the catalog model it is (catalog.known_models): what the corpus schema
cannot state — the norm, tied embeddings, node-limited routing, GPT-OSS's clamped GLU and expert biases — comes from
the one catalog entry identical in every stated field, and only for corpus cases."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import known_models, model as catalog_model, model_ids
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.catalog.serving import serving_scenario_from_dict
from narrowpath.schedule.step import predict
from narrowpath.spec.parse import model_from_dict

GPT_OSS_CORPUS_MODEL = {  # as training-sweeps-public.yaml writes GPT-OSS-120B: nothing about the clamp or biases
    "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8, "ffn": 2880, "ffn_act": "swiglu", "vocab": 201088,
    "seq_len": 4096, "experts": 128, "top_k": 4, "head_dim": 64, "sliding_window": 128, "sliding_window_every": 2}


def _case(model: dict, **plan) -> dict:
    return {"model": model,
            "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": 64, "gpus_per_node": 8, "nic_gbps_per_gpu": 400},
            "plan": {"tp": 1, "pp": 4, "dp": 16, "cp": 1, "ep": 8, "vpp": 1, "mbs": 1, "gbs": 512, "zero_stage": 1,
                     "recompute": "selective", "sequence_parallel": False, "precision": "bf16",
                     "framework": "Megatron-Bridge / NeMo 26.04 container", **plan}}


def test_a_gpt_oss_case_is_the_catalog_gpt_oss():
    scn = scenario_from_dict(_case(GPT_OSS_CORPUS_MODEL), name="c", allow_null=True)
    moe = scn.model.moe
    assert (moe.glu_clamp, moe.expert_bias, scn.model.norm) == (7.0, True, "rmsnorm")
    note = dict(scn.chosen)["model"]
    assert "gpt-oss-120b" in note and "GLU clamped at 7" in note and "expert biases" in note and "rmsnorm" in note
    # everything the case stated is kept as stated
    assert (scn.model.seq_len, scn.model.layers, moe.num_experts, moe.top_k) == (4096, 36, 128, 4)


def test_the_inherited_path_is_priced():
    """The catalog architecture adds GPT-OSS's expert path (workload.moe.expert_path_ops): the step is slower than
    the same case priced with a plain GLU and no biases — the fields change the prediction, not only the notes."""
    scn = scenario_from_dict(_case(GPT_OSS_CORPUS_MODEL), name="c", allow_null=True)
    plain = dataclasses.replace(scn, model=dataclasses.replace(
        scn.model, moe=dataclasses.replace(scn.model.moe, glu_clamp=0.0, expert_bias=False)))
    assert predict(scn).step_time_s > 1.03 * predict(plain).step_time_s


@pytest.mark.parametrize("field,value", [("vocab", 201089), ("layers", 24), ("top_k", 2), ("sliding_window", 0),
                                         ("head_dim", 0), ("kv_heads", 16)])
def test_one_stated_field_off_and_it_is_another_model(field, value):
    m = {k: v for k, v in {**GPT_OSS_CORPUS_MODEL, field: value}.items() if v}
    scn = scenario_from_dict(_case(m), name="c", allow_null=True)
    assert (scn.model.moe.glu_clamp, scn.model.moe.expert_bias, scn.model.norm) == (0.0, False, "layernorm")
    assert "model" not in dict(scn.chosen)


def test_a_scenario_file_is_read_as_written():
    """Outside a validation corpus the user can state every field, so nothing is filled in."""
    scn = scenario_from_dict(_case(GPT_OSS_CORPUS_MODEL), name="c")
    assert (scn.model.moe.glu_clamp, scn.model.moe.expert_bias, scn.model.norm) == (0.0, False, "layernorm")
    assert "model" not in dict(scn.chosen)


def test_the_seq_len_is_the_runs_not_the_architectures():
    scn = scenario_from_dict(_case({**GPT_OSS_CORPUS_MODEL, "seq_len": 8192}), name="c", allow_null=True)
    assert scn.model.seq_len == 8192 and scn.model.moe.glu_clamp == 7.0


def test_an_inference_case_is_recognised_too():
    case = {"model": {**{k: v for k, v in GPT_OSS_CORPUS_MODEL.items() if k != "seq_len"}, "name": "GPT-OSS 120B"},
            "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "plan": {"tp": 8, "pp": 1, "ep": 8, "dp": 1, "weights_precision": "fp8", "kv_precision": None,
                     "framework": "TensorRT-LLM 1.0"},
            "workload": {"scenario": "offline", "input_tokens": 1000, "output_tokens": 1000, "num_requests": 100}}
    scn, _ = serving_scenario_from_dict(case, name="c", allow_null=True)
    assert scn.model.moe.glu_clamp == 7.0 and "gpt-oss-120b" in dict(scn.chosen)["model"]


@pytest.mark.parametrize("eid", model_ids())
def test_every_catalog_model_written_as_a_corpus_would_is_itself(eid):
    """Property: a catalog model with every unstatable field at the parser's default is recognised as an entry with
    its own stated fields and gets that entry's architecture back; applying the rule twice changes nothing more."""
    ref = catalog_model(eid)
    blank = dataclasses.replace(ref, norm="layernorm", tied_embeddings=False, dropout=None, moe=None if ref.moe is None
                                else dataclasses.replace(ref.moe, max_nodes=0, expert_bias=False, glu_clamp=0.0))
    match = known_models.catalog_match(blank)
    if match is None:  # several entries share this shape and disagree on what a corpus cannot state
        return
    assert known_models._stated(match) == known_models._stated(ref)
    got, _ = known_models.with_catalog_architecture(blank)
    assert known_models._unstated(got) == known_models._unstated(match)
    again, notes = known_models.with_catalog_architecture(got)
    assert again == got and notes == ()


def test_entries_that_disagree_give_no_match(monkeypatch):
    a = catalog_model("gpt-oss-120b")
    b = dataclasses.replace(a, name="other", norm="layernorm")
    monkeypatch.setattr(known_models, "_by_shape", lambda: {known_models._stated(a): (a, b)})
    assert known_models.catalog_match(a) is None
    same = dataclasses.replace(a, name="alias")
    monkeypatch.setattr(known_models, "_by_shape", lambda: {known_models._stated(a): (a, same)})
    assert known_models.catalog_match(a) is a


def test_dropout_follows_the_inherited_family_unless_stated(monkeypatch):
    """A GeLU model read with the parser's LayerNorm default trains with dropout (the family rule); recognised as an
    RMSNorm catalog entry it trains without, as that family does — but a dropout the case states is kept."""
    gelu = model_from_dict({"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "ffn_act": "gelu", "vocab": 128,
                            "seq_len": 16})
    ref = dataclasses.replace(gelu, name="rms-gelu", norm="rmsnorm", dropout=False)
    monkeypatch.setattr(known_models, "_by_shape", lambda: {known_models._stated(ref): (ref,)})
    assert gelu.dropout is True
    got, notes = known_models.with_catalog_architecture(gelu)
    assert (got.norm, got.dropout) == ("rmsnorm", False) and "rms-gelu" in notes[0][1]
    assert "(the corpus schema has no field for it)" in notes[0][1]
    stated = dataclasses.replace(gelu, dropout=False)  # differs from its family's default: the case stated it
    assert known_models.with_catalog_architecture(stated)[0].dropout is False
    glu = model_from_dict({"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "ffn_act": "swiglu", "vocab": 128,
                           "seq_len": 16, "dropout": True})  # SwiGLU trains without by default: this one states it
    ref = dataclasses.replace(glu, name="rms-glu", norm="rmsnorm", dropout=False)
    monkeypatch.setattr(known_models, "_by_shape", lambda: {known_models._stated(ref): (ref,)})
    got, _ = known_models.with_catalog_architecture(glu)
    assert (got.norm, got.dropout) == ("rmsnorm", True)
