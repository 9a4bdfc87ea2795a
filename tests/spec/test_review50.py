"""From the fiftieth session's independent review of input handling: fields that were accepted and then ignored or
mispriced, inputs that ended in a traceback, and messages that named the wrong thing. Every bad input is held to
the contract: exit status 2, one line naming the field, no traceback (tests.cli.one_line)."""
from __future__ import annotations

import pytest

from tests.cli.one_line import one_line_error

SYSTEM = """system:
  gpus_per_node: 8
  device: H100-SXM5-80GB
  host_bw_bytes_per_s_per_gpu: {host_bw}
  tiers:
  - {{name: scale_up, bw_bytes_per_s_per_gpu: 450e9, domain_size: 8{up}}}
  - {{name: scale_out, bw_bytes_per_s_per_gpu: 50e9{out}}}
model: llama3-8b
num_gpus: 16
plan: {{tp: 2, pp: 2, dp: 4, gbs: 64, zero_stage: 1, offload_layers: 4}}
"""


def _system_file(tmp_path, host_bw="0", up="", out=""):
    f = tmp_path / "s.yaml"
    f.write_text(SYSTEM.format(host_bw=host_bw, up=up, out=out))
    return str(f)


@pytest.mark.parametrize("value", ["-5e9", ".nan", ".inf"])
def test_host_bandwidth_must_be_finite_and_not_negative(tmp_path, capsys, value):
    """A negative host rate priced the offload reload as a gain (a faster step), NaN gave a NaN step time."""
    one_line_error(capsys, ["predict", _system_file(tmp_path, host_bw=value)],
                   "host_bw_bytes_per_s_per_gpu", "finite number >= 0")


def test_host_bandwidth_zero_still_means_unknown(tmp_path, capsys):
    from narrowpath.cli.main import main
    assert main(["predict", _system_file(tmp_path, host_bw="0")]) == 0


@pytest.mark.parametrize("up, out, where", [
    (", topology: full-mesh", "", "tier[scale_up].topology"),
    (", topology: torus", "", "tier[scale_up].topology"),
    ("", ", topology: rail-optimized", "tier[scale_out].topology"),
])
def test_an_unknown_topology_is_refused(tmp_path, capsys, up, out, where):
    """`full-mesh` was priced as a switched domain, a misspelt rail_optimized as a fat tree."""
    one_line_error(capsys, ["predict", _system_file(tmp_path, up=up, out=out)], where, "full_mesh", "fat_tree")


@pytest.mark.parametrize("up, where", [
    (", in_network_reduction: 'false'", "tier[scale_up].in_network_reduction"),
    (", in_network_reduction: 1", "tier[scale_up].in_network_reduction"),
    (", pcie: 'no'", "tier[scale_up].pcie"),
])
def test_tier_switches_must_be_booleans(tmp_path, capsys, up, where):
    """The string 'false' is truthy: it turned SHARP on."""
    one_line_error(capsys, ["predict", _system_file(tmp_path, up=up)], where, "must be true or false")


PROFILE = "device: H100-SXM5-80GB\nmatrix_efficiency: {bf16: 0.55}\n"


@pytest.mark.parametrize("extra, where, known", [
    ("matrix_efficiency: {bfl16: 0.55}\n", "matrix_efficiency", "mxfp8"),
    ("tiers: {scaleup: {bw_efficiency: 0.5, alpha_s: 1e-6}}\n", "tiers", "scale_up"),
    ("matrix_efficiency_by_size: {bf61: [[1e9, 0.5]]}\n", "matrix_efficiency_by_size", "bf16"),
    ("memory_levels: [{name: hmb, capacity_bytes: 8e10, bw_bytes_per_s: 3e12}]\n", "memory_levels[0].name", "hbm"),
])
def test_a_profile_key_nothing_reads_is_refused(tmp_path, capsys, extra, where, known):
    """A misspelt dtype, tier or level name was never read: the default stood in for the measured figure."""
    text = PROFILE + extra if not extra.startswith("matrix_efficiency:") else "device: H100-SXM5-80GB\n" + extra
    f = tmp_path / "prof.yaml"
    f.write_text(text)
    one_line_error(capsys, ["predict", "--system", "dgx-h100", "--model", "llama3-8b", "--gpus", "8",
                            "--profile", str(f)], f"calibration[prof].{where}", known)


def test_every_shipped_and_probed_profile_still_loads():
    from pathlib import Path

    import yaml

    from narrowpath.catalog import store
    from narrowpath.catalog.resolve import calibration_from
    root = Path(__file__).resolve().parents[2]
    ids = [p["id"] for p in yaml.safe_load((root / "src/narrowpath/catalog/calibration.yaml").read_text())["profiles"]]
    assert len(ids) > 20 and all(store.calibration_for(i).name for i in ids)
    probed = calibration_from(str(root / "benchmarks/data/h200/h200-probed.yaml"))
    assert [lv.name for lv in probed.memory_levels] == ["L2", "HBM"]


DEVICE = """system:
  gpus_per_node: 8
  device:
    id: X
    peak_matrix_flop_per_s: {{bf16: 989.4e12, fp4: 2000e12}}
    peak_vector_flop_per_s: {{fp32: 66.9e12}}
    levels: [{{name: hbm, capacity_bytes: 85.9e9, bw_bytes_per_s: 3.35e12}}]
    block_scaled_formats: true
{extra}
  tiers:
  - {{name: scale_up, bw_bytes_per_s_per_gpu: 450e9, domain_size: 8}}
  - {{name: scale_out, bw_bytes_per_s_per_gpu: 50e9}}
model: llama3-8b
num_gpus: 8
plan: {{tp: 2, dp: 4, gbs: 64, zero_stage: 1{plan}}}
"""


def _device_file(tmp_path, extra, plan=""):
    f = tmp_path / "d.yaml"
    f.write_text(DEVICE.format(extra="\n".join("    " + line for line in extra.splitlines()), plan=plan))
    return str(f)


@pytest.mark.parametrize("extra, where", [
    ("energy_pj_per_flop: {bf16: -0.86}", "energy_pj_per_flop.bf16: must be a finite number >= 0"),
    ("energy_pj_per_flop: {bf16: .nan}", "energy_pj_per_flop.bf16: must be a finite number >= 0"),
    ("energy_pj_per_byte: {hbm: -28}", "energy_pj_per_byte.hbm: must be a finite number >= 0"),
    ("energy_pj_per_flop: {bfl16: 0.8}", "energy_pj_per_flop: must be one of"),
    ("energy_pj_per_byte: {hmb: 28}", "energy_pj_per_byte: must be one of"),
])
def test_energy_coefficients_are_finite_non_negative_and_known(tmp_path, capsys, extra, where):
    """A negative coefficient gave negative joules, NaN a null energy, a misspelt key an unpriced share."""
    one_line_error(capsys, ["analyze", _device_file(tmp_path, "tdp_w: 700\nidle_w: 120\n" + extra), "--no-what-ifs",
                            "--no-simulate"], "device[X]." + where)


def test_unsupported_formats_given_as_one_string_is_refused(tmp_path, capsys):
    """`unsupported_formats: nvfp4` was split into the characters n, v, f, p, 4: the device then ran NVFP4."""
    one_line_error(capsys, ["predict", _device_file(tmp_path, "unsupported_formats: nvfp4", ", precision: nvfp4")],
                   "device[X].unsupported_formats", "must list format names", "'nvfp4'")
    one_line_error(capsys, ["predict", _device_file(tmp_path, "unsupported_formats: [nvfp4]", ", precision: nvfp4")],
                   "plan.precision", "does not run nvfp4")


def test_whole_number_floats_are_kept_as_ints(tmp_path, capsys):
    """`num_gpus: 16.0` and `gpus_per_node: 8.0` were accepted but kept as floats; analyze, report, search and compare
    then failed with a TypeError (a float used as a count)."""
    from narrowpath.catalog.resolve import load_scenario
    from narrowpath.catalog.serving import serving_scenario_from_dict
    from narrowpath.cli.main import main
    f = tmp_path / "ng.yaml"
    f.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 16.0\nplan: {tp: 2, dp: 8, gbs: 64, zero_stage: 1}\n")
    hw = tmp_path / "hw.yaml"
    hw.write_text("hardware: {gpu: H100-SXM5-80GB, num_gpus: 16.0, gpus_per_node: 8.0, scale_up_gpus: 8.0}\n"
                  "model: llama3-8b\nplan: {tp: 2, dp: 8, gbs: 64, zero_stage: 1}\n")
    inline = tmp_path / "inline.yaml"
    inline.write_text(SYSTEM.format(host_bw="0", up="", out="").replace("gpus_per_node: 8", "gpus_per_node: 8.0")
                      .replace("domain_size: 8", "domain_size: 8.0"))
    for path in (f, hw, inline):
        scn = load_scenario(str(path))
        assert type(scn.num_gpus) is int and type(scn.system.gpus_per_node) is int
        assert all(type(t.domain_size) is int for t in scn.system.tiers)
    assert main(["analyze", str(f), "--no-what-ifs", "--no-simulate"]) == 0
    assert main(["analyze", str(inline), "--no-what-ifs", "--no-simulate"]) == 0
    assert main(["compare", str(f), str(hw)]) == 0
    capsys.readouterr()
    scn, _ = serving_scenario_from_dict({"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 8.0,
                                         "plan": {"tp": 2.0, "dp": 4}, "workload": {"input_tokens": 128.0,
                                                                                    "output_tokens": 32,
                                                                                    "num_requests": 10.0}})
    assert type(scn.num_gpus) is int and type(scn.plan.tp) is int and type(scn.load.num_requests) is int
    assert type(scn.load.input_tokens) is int


HF_MOE = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
          "vocab_size": 32000, "intermediate_size": 4096, "max_position_embeddings": 4096, "n_routed_experts": 8,
          "num_experts_per_tok": 2, "moe_intermediate_size": 512}
HF_FLAGS = ["--system", "dgx-h100", "--gpus", "8", "--seq-len", "2048", "--zero", "3", "--gbs", "64"]


def _hf_file(tmp_path, **keys):
    import json
    f = tmp_path / "cfg.json"
    f.write_text(json.dumps({**HF_MOE, **keys}))
    return str(f)


@pytest.mark.parametrize("keys, where", [
    ({"n_group": [4], "topk_group": 2}, "config.json.n_group"),
    ({"n_group": 4, "topk_group": [2]}, "config.json.topk_group"),
    ({"n_group": {"a": 1}, "topk_group": 2}, "config.json.n_group"),
])
def test_group_limited_routing_keys_that_are_no_integers_are_refused(tmp_path, capsys, keys, where):
    """`"n_group": [4]` or a quoted topk_group reached a `<` between str/list and int: TypeError."""
    one_line_error(capsys, ["predict", "--model", _hf_file(tmp_path, **keys), *HF_FLAGS], where, "must be an integer")


def test_group_limited_routing_reads_quoted_counts_as_the_reader_does_elsewhere(tmp_path):
    from narrowpath.catalog.resolve import resolve_model
    assert resolve_model(_hf_file(tmp_path, n_group="4", topk_group="2"), seq_len=2048).moe.max_nodes == 2
    assert resolve_model(_hf_file(tmp_path, n_group=4, topk_group=2), seq_len=2048).moe.max_nodes == 2
    assert resolve_model(_hf_file(tmp_path, n_group=None, topk_group=2), seq_len=2048).moe.max_nodes == 0


def test_a_zero_experts_per_token_is_refused(tmp_path, capsys):
    """The module docstring promises a zero count is refused; 0 was read as unstated and priced as top-2."""
    one_line_error(capsys, ["predict", "--model", _hf_file(tmp_path, num_experts_per_tok=0), *HF_FLAGS],
                   "config.json.num_experts_per_tok", "must be >= 1")
    from narrowpath.catalog.resolve import resolve_model
    assert resolve_model(_hf_file(tmp_path, num_experts_per_tok=None), seq_len=2048).moe.top_k == 2


@pytest.mark.parametrize("value", ["[a]", "5", "{peak: [1]}"])
def test_sources_must_be_a_mapping_of_field_to_text(tmp_path, capsys, value):
    """`sources: [a]` raised ValueError out of dict(); `sources: 5` was refused in Python's words."""
    one_line_error(capsys, ["predict", _device_file(tmp_path, f"sources: {value}")],
                   "device[X].sources: must be a mapping of field -> text")
    f = tmp_path / "s.yaml"
    f.write_text(SYSTEM.format(host_bw="0", up="", out="").replace("  tiers:", f"  sources: {value}\n  tiers:"))
    one_line_error(capsys, ["predict", str(f)], "system[system].sources: must be a mapping of field -> text")


@pytest.mark.parametrize("model, plan", [("llama3-8b", ""), ("gnmt-lstm", "lstm")])
def test_analyze_and_report_run_on_a_device_with_only_an_hbm_level(tmp_path, capsys, model, plan):
    """Every level but hbm is optional (Device.has_level) and predict runs without them; analyze refused the device
    with 'levels: no level named sram'. The ledger now has no row for a level the device lacks, and the LSTM's
    persistent-kernel what-if says it is not applicable."""
    import json

    from narrowpath.cli.main import main
    text = DEVICE.format(extra="    tdp_w: 700\n    idle_w: 120\n    energy_pj_per_flop: {bf16: 0.86}\n"
                               "    energy_pj_per_byte: {hbm: 28.0}", plan="")
    if plan == "lstm":
        text = text.replace("model: llama3-8b", f"model: {model}").replace(
            "plan: {tp: 2, dp: 4, gbs: 64, zero_stage: 1}", "plan: {tp: 1, dp: 8, gbs: 64}")
    f = tmp_path / "hbm.yaml"
    f.write_text(text + "calibration: H100-SXM5-80GB\n")
    assert main(["analyze", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "sram" not in doc["energy"]["bytes_j"] and doc["energy"]["bytes_j"]["hbm"] > 0
    if plan == "lstm":
        skipped = [w["skipped"] for w in doc["verdict"]["what_ifs"] if w["change"] == "persistent_rnn"]
        assert skipped == ["not applicable: X lists no SRAM level"]
    assert main(["report", str(f), "-o", str(tmp_path / "r.html")]) == 0


def test_a_gpu_count_given_twice_must_agree(tmp_path, capsys):
    """`hardware: {num_gpus: 8}` beside `num_gpus: 16` ran on 8 without a word."""
    from narrowpath.catalog.resolve import load_scenario
    f = tmp_path / "hwn.yaml"
    f.write_text("hardware: {gpu: H100-SXM5-80GB, num_gpus: 8}\nnum_gpus: 16\nmodel: llama3-8b\n"
                 "plan: {tp: 2, dp: 4, gbs: 64, zero_stage: 1}\n")
    one_line_error(capsys, ["predict", str(f)], "num_gpus: 16 disagrees with hardware.num_gpus 8")
    s = tmp_path / "serve.yaml"
    s.write_text("hardware: {gpu: H100-SXM5-80GB, num_gpus: 1}\nnum_gpus: 2\nmodel: llama3-8b\nplan: {tp: 1}\n"
                 "workload: {input_tokens: 12, output_tokens: 3}\n")
    one_line_error(capsys, ["serve", str(s), "--no-whatif"], "num_gpus: 2 disagrees with hardware.num_gpus 1")
    f.write_text(f.read_text().replace("num_gpus: 16", "num_gpus: 8.0"))
    assert load_scenario(str(f)).num_gpus == 8  # the two agree


@pytest.mark.parametrize("placement", ["[[tp], dp, pp, cp, ep]", "[tp, dp, pp, cp, {ep: 1}]"])
def test_a_placement_that_lists_no_axis_names_the_field(tmp_path, capsys, placement):
    """A nested list reached sorted(): the message was "plan: '<' not supported between ..."."""
    f = tmp_path / "p.yaml"
    f.write_text(f"system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {{tp: 2, dp: 4, gbs: 64, "
                 f"placement: {placement}}}\n")
    one_line_error(capsys, ["predict", str(f)], "plan.placement: must be one of tp, cp, ep, dp, pp")


@pytest.mark.parametrize("command, body", [
    ("predict", "num_gpus: 8\nplan: {tp: 2, dp: 4, gbs: 64}\n"),
    ("serve", "num_gpus: 1\nplan: {tp: 1}\nworkload: {input_tokens: 12, output_tokens: 3}\n"),
])
def test_a_name_must_be_text(tmp_path, capsys, command, body):
    f = tmp_path / "n.yaml"
    f.write_text("name: [1]\nsystem: dgx-h100\nmodel: llama3-8b\n" + body)
    one_line_error(capsys, [command, str(f)] + (["--no-whatif"] if command == "serve" else []),
                   "name: must be a string, got [1]")


def test_quoted_numbers_follow_one_convention(tmp_path, capsys):
    """spec.parse._num: a real-valued field takes a quoted number (YAML 1.1 reads 312e12 as a string); an integer
    field does not. moe.capacity_factor took '1.5' while moe.glu_clamp refused '7'; so did a serving plan's
    kv_memory_fraction and spec_acceptance, the workload's request_rate_per_s, the hardware block's NIC rate and
    power cap."""
    from narrowpath.catalog.resolve import load_scenario
    from narrowpath.catalog.serving import load_serving_scenario
    moe = ("model: {{layers: 2, hidden: 1024, heads: 8, ffn: 512, vocab: 1000, seq_len: 128, ffn_act: swiglu, "
           "moe: {{num_experts: 8, top_k: {top_k}, expert_ffn: 512, glu_clamp: '7', capacity_factor: '1.5'}}}}\n")
    f = tmp_path / "m.yaml"
    f.write_text("hardware: {gpu: H100-SXM5-80GB, nic_gbps_per_gpu: '400', power_limit_w: '600'}\nnum_gpus: 8\n"
                 + moe.format(top_k=2) + "plan: {tp: 1, dp: 8, gbs: 64, bucket_bytes: '4e7'}\n")
    scn = load_scenario(str(f))
    assert (scn.model.moe.glu_clamp, scn.model.moe.capacity_factor, scn.system.power_limit_w) == (7.0, 1.5, 600.0)
    assert scn.system.tier("scale_out").bw_bytes_per_s_per_gpu == 50e9 and scn.plan.bucket_bytes == 4e7
    s = tmp_path / "s.yaml"
    s.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 1\nplan: {tp: 1, kv_memory_fraction: '0.8', "
                 "spec_tokens: 2, spec_acceptance: '0.5'}\nworkload: {scenario: server, request_rate_per_s: '2', "
                 "input_tokens: 12, output_tokens: 3}\n")
    served, _ = load_serving_scenario(str(s))
    assert (served.plan.kv_memory_fraction, served.plan.spec_acceptance, served.load.rate_per_s) == (0.8, 0.5, 2.0)
    # integer fields take no quoted numbers, here as everywhere
    f.write_text(f.read_text().replace("top_k: 2", "top_k: '2'"))
    one_line_error(capsys, ["predict", str(f)], "model.moe.top_k", "must be an integer")
    s.write_text(s.read_text().replace("input_tokens: 12", "input_tokens: '12'"))
    one_line_error(capsys, ["serve", str(s), "--no-whatif"], "workload.input_tokens: must be a number")
