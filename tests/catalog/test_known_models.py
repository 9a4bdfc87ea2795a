"""A validation case's model recognised as the catalog model it is (catalog.known_models): what the corpus schema
cannot state — the norm, tied embeddings, node-limited routing, GPT-OSS's clamped GLU and expert biases, and in the
inference schema sliding windows and MTP layers — comes from the one catalog entry identical in every other field,
only for corpus cases, and never over a field the case writes."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from narrowpath.catalog import known_models, model as catalog_model, model_ids
from narrowpath.catalog.known_models import NOT_ARCHITECTURE, UNSTATED, catalog_match, with_catalog_architecture
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.catalog.serving import load_serving_scenario, serving_scenario_from_dict
from narrowpath.schedule.step import predict
from narrowpath.spec.model import MLA, MoE
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


def _training(model: dict):
    return scenario_from_dict(_case(model), name="c", allow_null=True, corpus="training")


def _path(scn) -> tuple:
    return scn.model.moe.glu_clamp, scn.model.moe.expert_bias, scn.model.norm


def _serving_case(model: dict) -> dict:
    return {"model": {**model, "name": "GPT-OSS 120B"},
            "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "plan": {"tp": 8, "pp": 1, "ep": 8, "dp": 1, "weights_precision": "fp8", "kv_precision": None,
                     "framework": "TensorRT-LLM 1.0"},
            "workload": {"scenario": "offline", "input_tokens": 1000, "output_tokens": 1000, "num_requests": 100}}


def test_a_gpt_oss_case_is_the_catalog_gpt_oss():
    scn = _training(GPT_OSS_CORPUS_MODEL)
    assert _path(scn) == (7.0, True, "rmsnorm")
    note = dict(scn.chosen)["model"]
    assert "gpt-oss-120b" in note and "GLU clamped at 7" in note and "expert biases" in note and "rmsnorm" in note
    # everything the case stated is kept as stated
    assert (scn.model.seq_len, scn.model.layers, scn.model.moe.num_experts, scn.model.moe.top_k) == (4096, 36, 128, 4)


def test_the_inherited_path_is_priced():
    """The catalog architecture adds GPT-OSS's expert path (workload.moe.expert_path_ops): the step is slower than
    the same case priced with a plain GLU and no biases — the fields change the prediction, not only the notes."""
    scn = _training(GPT_OSS_CORPUS_MODEL)
    plain = dataclasses.replace(scn, model=dataclasses.replace(
        scn.model, moe=dataclasses.replace(scn.model.moe, glu_clamp=0.0, expert_bias=False)))
    assert predict(scn).step_time_s > 1.03 * predict(plain).step_time_s


def _other(field: str, value):
    """A value of a model field that differs from `value` and still makes a valid model."""
    if field == "mla":
        return MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    if field == "arch":
        return "lstm"
    if field == "ffn_act":
        return "gelu"
    if field.endswith("sliding_window_every") or field.endswith("layer_every"):
        return 3
    if isinstance(value, bool):
        return not value
    if field in ("heads", "kv_heads"):
        return value * 2 if field == "heads" else value // 2
    if isinstance(value, int):
        return value + 1 if field not in ("moe.top_k",) else value - 1
    raise AssertionError(f"no other value for {field} = {value!r}")


COMPARED = [f for f in known_models.FIELDS  # GPT-OSS has no dense layer: no dense ffn
            if f not in UNSTATED["training"] + NOT_ARCHITECTURE + ("moe", "ffn")]


@pytest.mark.parametrize("field", COMPARED)
def test_any_compared_field_off_and_it_is_another_model(field):
    """Every architecture field the training schema can state is compared: one of them off by one step and the
    model is no longer GPT-OSS, so nothing is filled in."""
    m = _training(GPT_OSS_CORPUS_MODEL).model
    blank = dataclasses.replace(m, norm="layernorm", dropout=None,
                                moe=dataclasses.replace(m.moe, glu_clamp=0.0, expert_bias=False))
    filled = UNSTATED["training"]
    assert catalog_match(blank, filled) is not None
    value = known_models._get(blank, field)
    other = _other(field, value)
    if field.startswith("moe."):
        off = dataclasses.replace(blank, moe=dataclasses.replace(blank.moe, **{field[4:]: other}))
    else:
        off = dataclasses.replace(blank, **{field: other})
    assert catalog_match(off, filled) is None


def test_the_unstated_fields_are_fields_and_the_rest_is_compared():
    """The lists name real Model / MoE fields, and every other field (a future one included) is compared."""
    names = set(known_models.FIELDS)
    for schema, fields in UNSTATED.items():
        assert set(fields) <= names, schema
    assert set(NOT_ARCHITECTURE) <= names
    assert "head_dim" in COMPARED and "moe.num_experts" in COMPARED and "mtp_layers" not in COMPARED


def test_a_field_the_case_writes_is_compared_not_overwritten():
    """A case that writes `norm: layernorm` states a different model from the catalog's RMSNorm GPT-OSS: nothing is
    filled in; one that writes the catalog's own values is recognised for the rest; a written dropout stays."""
    assert _path(_training({**GPT_OSS_CORPUS_MODEL, "norm": "layernorm"})) == (0.0, False, "layernorm")
    scn = _training({**GPT_OSS_CORPUS_MODEL, "norm": "rmsnorm", "dropout": True})
    assert _path(scn) == (7.0, True, "rmsnorm") and scn.model.dropout is True
    assert "rmsnorm" not in dict(scn.chosen)["model"]  # what it wrote is not reported as taken
    tied = {**GPT_OSS_CORPUS_MODEL, "tied_embeddings": True}
    assert _training(tied).model.tied_embeddings is True and _path(_training(tied)) == (0.0, False, "layernorm")
    block = {k: v for k, v in GPT_OSS_CORPUS_MODEL.items() if k not in ("experts", "top_k")}
    block["moe"] = {"num_experts": 128, "top_k": 4, "expert_ffn": 2880, "glu_clamp": 0.0}
    assert _path(_training(block))[0] == 0.0  # a written plain GLU is a different model


def test_a_model_given_whole_is_left_alone():
    """A catalog id, or a HuggingFace config in the case, states the whole architecture itself."""
    whole = _training("gpt-oss-120b")
    assert whole.model == catalog_model("gpt-oss-120b") and "model" not in dict(whole.chosen)
    m = model_from_dict(GPT_OSS_CORPUS_MODEL)
    assert with_catalog_architecture(m, {"hf_config": "x.json"}, "training") == (m, ())
    assert with_catalog_architecture(m, {"model_type": "gpt_oss", "num_hidden_layers": 36}, "training") == (m, ())


@pytest.mark.parametrize("field,value", [("vocab", 201089), ("layers", 24), ("top_k", 2), ("sliding_window", 0),
                                         ("head_dim", 0), ("kv_heads", 16)])
def test_one_written_field_off_and_it_is_another_model(field, value):
    m = {k: v for k, v in {**GPT_OSS_CORPUS_MODEL, field: value}.items() if v}
    scn = _training(m)
    assert _path(scn) == (0.0, False, "layernorm")
    assert "model" not in dict(scn.chosen)


def test_a_scenario_file_is_read_as_written(tmp_path):
    """Outside a validation corpus the user can state every field, so nothing is filled in — for a training
    scenario (even one that leaves knobs open) and for a serving file."""
    scn = scenario_from_dict(_case(GPT_OSS_CORPUS_MODEL), name="c", allow_null=True)
    assert _path(scn) == (0.0, False, "layernorm") and "model" not in dict(scn.chosen)
    f = tmp_path / "serve.yaml"
    f.write_text(yaml.safe_dump(_serving_case({k: v for k, v in GPT_OSS_CORPUS_MODEL.items() if k != "seq_len"})))
    served, _ = load_serving_scenario(f)
    assert _path(served) == (0.0, False, "layernorm") and "model" not in dict(served.chosen)


def test_the_seq_len_is_the_runs_not_the_architectures():
    scn = _training({**GPT_OSS_CORPUS_MODEL, "seq_len": 8192})
    assert scn.model.seq_len == 8192 and scn.model.moe.glu_clamp == 7.0


def test_an_inference_case_is_recognised_by_its_own_schema():
    """The inference schema has no sliding-window keys: a GPT-OSS case written by it (no window) is GPT-OSS, and
    gets the window too; one that writes the window is recognised as well."""
    plain = {k: v for k, v in GPT_OSS_CORPUS_MODEL.items() if k not in ("seq_len", "sliding_window",
                                                                        "sliding_window_every")}
    for model in (plain, {**plain, "sliding_window": 128, "sliding_window_every": 2}):
        scn, _ = serving_scenario_from_dict(_serving_case(model), name="c", allow_null=True, corpus=True)
        assert (scn.model.moe.glu_clamp, scn.model.sliding_window, scn.model.sliding_window_every) == (7.0, 128, 2)
        note = dict(scn.chosen)["model"]
        assert "gpt-oss-120b" in note and ("a sliding window of 128 tokens" in note) == (model is plain)
    # the training schema can state the window, so a training case without one is a different model
    assert _path(_training({k: v for k, v in GPT_OSS_CORPUS_MODEL.items()
                            if k not in ("sliding_window", "sliding_window_every")}))[0] == 0.0


def _as_corpus(m) -> dict:
    """A catalog model written in the corpus's flat spelling (shared/validation/README.md), nothing the schema lacks."""
    d = {"layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
         "ffn": m.ffn, "ffn_act": m.ffn_act, "vocab": m.vocab, "seq_len": m.seq_len}
    if m.moe is not None:
        d.update(experts=m.moe.num_experts, top_k=m.moe.top_k, ffn=m.moe.expert_ffn,
                 shared_experts=m.moe.shared_experts or None, shared_ffn=m.moe.shared_ffn,
                 dense_layers=m.moe.first_dense_layers or None, dense_ffn=m.ffn)
    if m.mla is not None:
        d.update(attention="mla", **{f.name: getattr(m.mla, f.name) for f in dataclasses.fields(m.mla)})
    if m.sliding_window:
        d.update(sliding_window=m.sliding_window, sliding_window_every=m.sliding_window_every)
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("eid", [e for e in model_ids() if catalog_model(e).arch == "transformer"])
def test_every_catalog_model_written_in_the_corpus_spelling_is_itself(eid):
    """Property: each catalog transformer written as a training corpus would write it (flat keys, parsed as the
    corpus reader parses them) is recognised as an entry of its own architecture and gets back everything the
    schema cannot state; applying the rule again changes nothing more."""
    ref = catalog_model(eid)
    raw = _as_corpus(ref)
    parsed = model_from_dict(raw)
    got, _ = with_catalog_architecture(parsed, raw, "training")
    match = catalog_match(parsed, tuple(f for f in UNSTATED["training"] if f not in raw))
    assert match is not None and known_models._key(match, ()) == known_models._key(ref, ())
    assert all(known_models._get(got, f) == known_models._get(ref, f) for f in UNSTATED["training"])
    assert with_catalog_architecture(got, raw, "training") == (got, ())


@pytest.mark.parametrize("eid", model_ids())
def test_every_catalog_model_written_as_a_corpus_would_is_itself(eid):
    """Property: a catalog model with every field the training schema cannot state at the parser's default is
    recognised as an entry of the same architecture (no two entries collide) and gets that architecture back;
    applying the rule again changes nothing more."""
    ref = catalog_model(eid)
    blank = dataclasses.replace(ref, norm="layernorm", tied_embeddings=False, dropout=None, moe=None if ref.moe is None
                                else dataclasses.replace(ref.moe, max_nodes=0, expert_bias=False, glu_clamp=0.0))
    filled = UNSTATED["training"]
    match = catalog_match(blank, filled)
    assert match is not None and known_models._key(match, ()) == known_models._key(ref, ())
    raw = {"layers": ref.layers}  # a corpus mapping that writes none of the filled fields
    got, _ = with_catalog_architecture(blank, raw, "training")
    assert all(known_models._get(got, f) == known_models._get(ref, f) for f in filled)
    assert with_catalog_architecture(got, raw, "training") == (got, ())


def _only(monkeypatch, *models):
    """The catalog as these models alone (the per-filled-fields key cache bypassed while patched)."""
    monkeypatch.setattr(known_models, "_catalog", lambda: models)
    keys = known_models._catalog_keys
    monkeypatch.setattr(known_models, "_catalog_keys", getattr(keys, "__wrapped__", keys))


def test_entries_that_disagree_give_no_match(monkeypatch):
    a = catalog_model("gpt-oss-120b")
    b = dataclasses.replace(a, name="other", norm="layernorm")
    _only(monkeypatch, a, b)
    assert catalog_match(a, UNSTATED["training"]) is None
    same = dataclasses.replace(a, name="alias")
    _only(monkeypatch, a, same)
    assert catalog_match(a, UNSTATED["training"]) is a


def test_tied_embeddings_and_dropout_follow_the_entry(monkeypatch):
    """A GeLU model read with the parser's LayerNorm default trains with dropout (the family rule); recognised as an
    RMSNorm entry with tied embeddings it ties them and trains without dropout, as that family does."""
    gelu = model_from_dict({"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "ffn_act": "gelu", "vocab": 128,
                            "seq_len": 16})
    ref = dataclasses.replace(gelu, name="rms-gelu", norm="rmsnorm", tied_embeddings=True, dropout=False)
    _only(monkeypatch, ref)
    assert gelu.dropout is True
    got, notes = with_catalog_architecture(gelu, {"layers": 2}, "training")
    assert (got.norm, got.tied_embeddings, got.dropout) == ("rmsnorm", True, False) and "rms-gelu" in notes[0][1]
    assert "tied embeddings" in notes[0][1] and "(the corpus schema has no field for them)" in notes[0][1]
    kept, _ = with_catalog_architecture(gelu, {"layers": 2, "dropout": True}, "training")
    assert kept.dropout is True
    only_norm = dataclasses.replace(ref, tied_embeddings=False)
    _only(monkeypatch, only_norm)
    assert "(the corpus schema has no field for it)" in with_catalog_architecture(gelu, {}, "training")[1][0][1]


def test_a_dense_case_never_matches_an_moe_entry(monkeypatch):
    m = model_from_dict({"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "ffn_act": "swiglu", "vocab": 128,
                         "seq_len": 16})
    moe = dataclasses.replace(m, name="moe", norm="rmsnorm", moe=MoE(num_experts=4, top_k=1, expert_ffn=256))
    _only(monkeypatch, moe)
    assert catalog_match(m, UNSTATED["training"]) is None


def test_mtp_layers_belong_to_the_run():
    """DeepSeek-V3 trained without its multi-token-prediction module (a run's choice) is still DeepSeek-V3: it takes
    the catalog's node-limited routing and keeps the MTP layers it states (none)."""
    raw = {**_as_corpus(catalog_model("deepseek-v3")), "mtp_layers": 0}
    scn = scenario_from_dict(
        {**_case(raw), "plan": {**_case(raw)["plan"], "ep": 8, "pp": 8, "dp": 8}}, name="c", allow_null=True,
        corpus="training")
    assert scn.model.mtp_layers == 0 and scn.model.moe.max_nodes == 4
    assert "at most 4 nodes" in dict(scn.chosen)["model"]


def test_an_all_expert_model_without_a_dense_width_is_recognised():
    """A nested `moe:` block giving only the experts' width leaves the dense MLP width at the parser's default; a
    model with no dense layer has no use for it, so GPT-OSS is still GPT-OSS."""
    nested = {k: v for k, v in GPT_OSS_CORPUS_MODEL.items() if k not in ("experts", "top_k", "ffn")}
    nested["moe"] = {"experts": 128, "top_k": 4, "ffn": 2880}
    assert _path(_training(nested)) == (7.0, True, "rmsnorm")


def test_a_null_in_an_moe_block_is_absent():
    m = model_from_dict({**{k: v for k, v in GPT_OSS_CORPUS_MODEL.items() if k not in ("experts", "top_k")},
                         "moe": {"experts": 128, "top_k": 4, "ffn": 2880, "glu_clamp": None, "expert_bias": None}})
    assert (m.moe.glu_clamp, m.moe.expert_bias) == (0.0, False)
    got, _ = with_catalog_architecture(m, {"moe": {"experts": 128, "glu_clamp": None}}, "training")
    assert got.moe.glu_clamp == 7.0  # a null is not written: taken from the catalog


def test_a_dense_models_width_is_compared():
    """Only a model with no dense layer drops the dense width from the comparison: Llama 3 8B with one more MLP
    column is not Llama 3 8B."""
    raw = _as_corpus(catalog_model("llama3-8b"))
    assert with_catalog_architecture(model_from_dict(raw), raw, "training")[0].norm == "rmsnorm"
    off = {**raw, "ffn": raw["ffn"] + 1}
    assert with_catalog_architecture(model_from_dict(off), off, "training")[1] == ()
