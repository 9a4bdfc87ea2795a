"""A case's stated model against the FLOPs per token its own figures imply (validate.flop_check), by hand."""
from __future__ import annotations

import json
import math

import pytest

from narrowpath.catalog import model
from narrowpath.cli.main import main
from narrowpath.spec.parse import model_from_dict
from narrowpath.validate.flop_check import TOLERANCE, FlopCheck, flop_check, measured_flop_per_token, summary_lines
from narrowpath.workload.counts import causal_model_flop_per_token, model_flop_per_token


def test_llama3_8b_both_conventions_by_hand():
    """Llama-3 8B at s 8192: every attention score counted, 57,912,852,480 FLOPs per token (NeMo 25.07's Llama-3 8B
    row implies 57.91 GFLOP). The scores and weighted sum are 2·32·8192·(128 + 128) =
    134,217,728 forward FLOPs per layer and token; × 32 layers × 3 (forward + backward) = 12,884,901,888, half of it
    6,442,450,944 under a causal count: 51,470,401,536 — Megatron-Bridge 25.11's Llama-3 8B rows imply 51.47."""
    m = model("llama3-8b")
    assert m.seq_len == 8192
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 6_442_450_944
    check = flop_check(m, 51.47e9)
    assert (check.model_low, check.model_high) == (51_470_401_536, model_flop_per_token(m))
    assert abs(check.deviation) < 1e-5 and check.consistent  # 51.47e9 is the table's rounding
    assert flop_check(m, 57.91e9).consistent


def test_windowed_layers_keep_their_window_whole():
    """Two layers, one windowed to 128 keys of 4096 (h 2880, 64 heads of 64, GPT-OSS-like shapes): only the
    full layer's scores are halved — 2·64·4096·(64 + 64) = 67,108,864 forward FLOPs, × 3 / 2 = 100,663,296."""
    m = model_from_dict(dict(name="w", layers=2, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880,
                             ffn_act="swiglu", vocab=1000, seq_len=4096, sliding_window=128,
                             sliding_window_every=2))
    assert sorted(m.is_window_layer(i) for i in range(2)) == [False, True]
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 100_663_296


def test_multi_token_prediction_layers_count_their_scores_too():
    """One MTP module attends like the last layer (DeepSeek-V3 §2.2): Llama-3 8B's shapes with one MTP layer halve
    33 layers' scores under the causal count, 33 × 3 × 134,217,728 / 2 = 6,643,777,536 FLOPs per token."""
    import dataclasses
    m = dataclasses.replace(model("llama3-8b"), mtp_layers=1)
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 6_643_777_536


def test_an_mtp_module_after_a_windowed_last_layer_attends_through_the_window():
    """Three layers windowed every other one (layers 0 and 2, 128 keys) and one MTP module, which attends as the
    last layer does — through the window: only layer 1's scores are halved, 3 · 67,108,864 / 2 = 100,663,296."""
    m = model_from_dict(dict(name="w3", layers=3, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880,
                             ffn_act="swiglu", vocab=1000, seq_len=4096, sliding_window=128, sliding_window_every=2,
                             mtp_layers=1))
    assert [m.is_window_layer(i) for i in range(3)] == [True, False, True]
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 100_663_296


def test_an_mtp_module_after_a_full_last_layer_is_halved_like_it():
    """Five layers windowed every third (layers 0 and 3), the last one full, and one MTP module attending like it:
    layers 1, 2, 4 and the module halved, 4 · 100,663,296 = 402,653,184."""
    m = model_from_dict(dict(name="w5", layers=5, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880,
                             ffn_act="swiglu", vocab=1000, seq_len=4096, sliding_window=128, sliding_window_every=3,
                             mtp_layers=1))
    assert [m.is_window_layer(i) for i in range(7)] == [True, False, False, True, False, False, True]
    assert model_flop_per_token(m) - causal_model_flop_per_token(m) == 402_653_184


@pytest.mark.parametrize("measured, expected", [
    ({"model_tflops_per_gpu": 1501, "tokens_per_s_per_gpu": 13783}, 1501e12 / 13783),
    ({"model_tflops_per_gpu": 1501.0}, None), ({"tokens_per_s_per_gpu": 100}, None),
    ({"model_tflops_per_gpu": 0, "tokens_per_s_per_gpu": 100}, None),
    ({"model_tflops_per_gpu": -5, "tokens_per_s_per_gpu": 100}, None),
    ({"model_tflops_per_gpu": True, "tokens_per_s_per_gpu": 100}, None),
    ({"model_tflops_per_gpu": math.nan, "tokens_per_s_per_gpu": 100}, None),
    ({"model_tflops_per_gpu": "1501", "tokens_per_s_per_gpu": 100}, None),
    (None, None), ("step 1 s", None),
])
def test_measured_flops_per_token_only_from_two_positive_numbers(measured, expected):
    """Other `measured` fields are documentation (validation README): anything but two positive finite numbers is
    not checked, and never an error."""
    assert measured_flop_per_token(measured) == expected


def test_deviation_is_the_distance_outside_the_two_conventions():
    fc = FlopCheck(90.0, 100.0, 110.0)
    assert fc.deviation == pytest.approx(-0.10) and not fc.consistent
    assert FlopCheck(121.0, 100.0, 110.0).deviation == pytest.approx(0.10)
    assert FlopCheck(105.0, 100.0, 110.0).deviation == 0.0
    edge = FlopCheck(100.0 * (1 - TOLERANCE) + 1e-9, 100.0, 110.0)
    assert edge.consistent and not FlopCheck(100.0 * (1 - TOLERANCE) - 1e-6, 100.0, 110.0).consistent
    assert fc.to_json() == {"measured_gflop_per_token": 90e-9, "model_gflop_per_token": [100e-9, 110e-9],
                            "deviation": pytest.approx(-0.1), "consistent": False}


def test_summary_names_one_case_per_model_size_worst_first():
    flagged = [("a", FlopCheck(90.0e9, 100.0e9, 110.0e9)), ("b", FlopCheck(80.0e9, 100.0e9, 110.0e9)),
               ("c", FlopCheck(10.0e9, 20.0e9, 30.0e9))]
    lines = summary_lines(7, flagged)
    assert lines[0].startswith("3 of 7 cases")
    assert [ln.split(":")[0] for ln in lines[1:]] == ["c", "b"]  # −50 %, then the worse of the two 110-GFLOP models
    assert summary_lines(0, []) == []


CASE = """- id: {id}
  model: {{layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, ffn_act: swiglu, vocab: 128256,
          seq_len: 8192}}
  hardware: {{gpu: H100-SXM5-80GB, num_gpus: 8, gpus_per_node: 8, nic_gbps_per_gpu: 400}}
  plan: {{tp: 1, pp: 1, dp: 8, ep: 1, cp: 1, vpp: 1, mbs: 1, gbs: 128, zero_stage: 1, recompute: none,
         sequence_parallel: false, precision: bf16}}
  measured: {{step_time_s: 20.0{extra}}}
"""
CORPUS = "schema: validation-corpus/1\ncases:\n" + "".join(
    CASE.format(id=cid, extra=extra) for cid, extra in
    (("as-stated", ", tokens_per_s_per_gpu: 6553.6, model_tflops_per_gpu: 379.5"),
     ("another-model-ran", ", tokens_per_s_per_gpu: 6553.6, model_tflops_per_gpu: 250.0"),
     ("no-flop-figure", "")))


def test_validate_reports_the_disagreeing_case(tmp_path, capsys):
    """379.5 TFLOP/s at 6,553.6 tokens/s is 57.91 GFLOP per token, Llama-3 8B's full count: consistent; 250 TFLOP/s
    is 38.1 GFLOP, 26 % under even the causal 51.47: flagged, in JSON and on the console; a case without the two
    figures is not checked. The cases' errors are priced as always."""
    corpus = tmp_path / "c.yaml"
    corpus.write_text(CORPUS)
    assert main(["validate", "--corpus", str(corpus), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cases = {c["id"]: c for c in data["cases"]}
    assert cases["as-stated"]["flop_check"]["consistent"] is True
    bad = cases["another-model-ran"]["flop_check"]
    assert bad["consistent"] is False
    assert bad["deviation"] == pytest.approx(250e12 / 6553.6 / 51_470_401_536 - 1)
    assert "flop_check" not in cases["no-flop-figure"]
    assert data["flop_inconsistent"] == ["another-model-ran"]
    assert cases["another-model-ran"]["error"] == cases["as-stated"]["error"]
    assert main(["validate", "--corpus", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 cases that publish model TFLOP/s" in out
    assert "another-model-ran: measured 38.1 GFLOP/token, stated model 51.5–57.9 (-26 %)" in out
