"""The boards a published run may name beyond the shipped corpora (GH200, H100 PCIe/NVL, H200 NVL, L40S, H20, A800,
V100, MI325X, MI355X): each figure is the vendor's, written out here by hand; a run on each is read and priced (a
validation case names it by its published name); a format the tensor cores lack is refused for training in one line
naming the field, and a board without BF16 defaults to FP16."""
from __future__ import annotations

import json

import pytest
import yaml

from narrowpath.catalog import calibration_for, device, system
from narrowpath.errors import SpecError

ADDED = ("GH200-96GB", "GH200-144GB", "H100-PCIe-80GB", "H100-NVL-94GB", "H200-NVL-141GB", "L40S", "H20-96GB",
         "A800-SXM4-80GB", "V100-SXM2-32GB", "V100-SXM2-16GB", "MI325X", "MI355X")


@pytest.mark.parametrize("dev, bf16, fp8, hbm_bw, hbm_gib, tdp", [
    # GH200 datasheet: the Hopper GPU's 1,979 BF16 / 3,958 FP8 TFLOPS with sparsity = H100 SXM5's dense rates;
    # JSC JUPITER page: 96 GB HBM3 at 4 TB/s; a 450-1,000 W programmable module
    ("GH200-96GB", 989.4e12, 1978.9e12, 4.0e12, 96, 1000),
    ("GH200-144GB", 989.4e12, 1978.9e12, 4.9e12, 144, 1000),  # HBM3e version: 144 GB at 4.9 TB/s
    # H100 datasheet, PCIe column: 1,513 BF16 / 3,026 FP8 with sparsity; 80 GB HBM2e at 2 TB/s; 350 W
    ("H100-PCIe-80GB", 756e12, 1513e12, 2.0e12, 80, 350),
    # H100 NVL: 1,671 BF16 / 3,341 FP8 with sparsity; 94 GB HBM3 at 3.9 TB/s; 350-400 W
    ("H100-NVL-94GB", 835.5e12, 1670.5e12, 3.9e12, 94, 400),
    # H200 NVL: the H100 NVL's rates; 141 GB HBM3e at 4.8 TB/s; up to 600 W
    ("H200-NVL-141GB", 835.5e12, 1670.5e12, 4.8e12, None, 600),
    # L40S datasheet: 733 BF16 / 1,466 FP8 with sparsity; 48 GB GDDR6 at 864 GB/s; 350 W (capacity: see below)
    ("L40S", 362.05e12, 733e12, 864e9, None, 350),
    # H20 (partners' figures): 148 BF16 / 296 FP8 TFLOPS; 96 GB HBM3 at 4.0 TB/s; 400 W
    ("H20-96GB", 148e12, 296e12, 4.0e12, 96, 400),
    ("A800-SXM4-80GB", 312e12, None, 2.039e12, 80, 400),  # the A100 SXM4 80 GB die, clocks and memory
    # V100 SXM2: 125 TFLOPS tensor (FP16 only), 32 GB HBM2 at 900 GB/s, 300 W
    ("V100-SXM2-32GB", None, None, 900e9, 32, 300),
    # MI325X: MI300X's 1,307.4 BF16 / 2,614.9 FP8; 256 GB HBM3E at 6 TB/s; 1,000 W
    ("MI325X", 1307.4e12, 2614.9e12, 6.0e12, 256, 1000),
    # MI355X: 256 CUs x 2.4 GHz x 4,096 FLOPs per CU per clock = 2,516.6 BF16 (x2 FP8); 288 GB at 8 TB/s; 1,400 W
    ("MI355X", 2516.6e12, 5033e12, 8.0e12, 288, 1400),
])
def test_added_device_figures_are_the_datasheets(dev, bf16, fp8, hbm_bw, hbm_gib, tdp):
    d = device(dev)
    assert d.hbm.bw_bytes_per_s == hbm_bw and d.tdp_w == tdp
    if bf16:
        assert d.matrix_peak("bf16") == bf16
    if fp8:
        assert d.matrix_peak("fp8") == fp8
    else:
        assert "fp8" not in d.peak_matrix_flop_per_s
    if hbm_gib:
        assert d.hbm.capacity_bytes == pytest.approx(hbm_gib * 2**30, rel=2e-3)  # vendors' "GB" are GiB of memory


def test_derived_rates_follow_their_arithmetic():
    """The exponential rate is SMs x 16 exp2 per clock (CUDA throughput table) x the tensor peak's clock: H100 PCIe
    114 x 16 x (756e12 / (114 x 4,096)) = 2.95e12; V100 80 x 16 x 1.53e9 = 1.96e12 and its tensor peak 640 tensor
    cores x 64 FMA x 2 x 1.53e9 = 125.3e12; L40S 142 x 16 x 2.52e9 = 5.73e12; MI355X's FP4 is 4x its BF16."""
    assert device("H100-PCIe-80GB").peak_exp_per_s == pytest.approx(114 * 16 * 756e12 / (114 * 4096), rel=1e-3)
    v100 = device("V100-SXM2-32GB")
    assert v100.peak_exp_per_s == pytest.approx(80 * 16 * 1.53e9, rel=1e-3)
    assert v100.matrix_peak("fp16") == pytest.approx(640 * 64 * 2 * 1.53e9, rel=3e-3)
    assert device("L40S").peak_exp_per_s == pytest.approx(142 * 16 * 2.52e9, rel=1e-3)
    # with ECC on, 48 GB of GDDR6 leave 46,068 MiB (MLPerf Training v4.0, NVIDIA's L40S system file)
    assert device("L40S").hbm.capacity_bytes == pytest.approx(46068 * 2**20, rel=1e-3)
    mi355 = device("MI355X")
    assert mi355.matrix_peak("fp4") == pytest.approx(4 * mi355.matrix_peak("bf16"), rel=1e-3)
    assert mi355.block_scaled_formats and mi355.supports("mxfp8") is None


@pytest.mark.parametrize("sid, up, nic, per_node, domain, topology", [
    # JUPITER quad node: NVLink4 all to all, 150 GB/s per direction per pair x 3 peers; one NDR200 per GPU
    ("gh200-quad", 450e9, 25e9, 4, 4, "full_mesh"),
    # two H100 NVL cards bridged at 600 GB/s bidirectional, no switch: the node is the pair
    ("h100-nvl-pair", 300e9, 25e9, 2, 2, "full_mesh"),
    ("h200-nvl-quad", 450e9, 25e9, 4, 4, "full_mesh"),  # a 4-way bridge at 900 GB/s bidirectional per GPU
    ("l40s-pcie-server", 25e9, 25e9, 8, 8, "switched"),  # no NVLink: PCIe Gen4 peer traffic
    ("hgx-a800", 200e9, 25e9, 8, 8, "switched"),  # NVLink cut to 400 GB/s bidirectional
    # DGX-2: 16 V100 on 12 NVSwitches at 6 x 25 GB/s per direction; 8 EDR 100 Gb/s NICs per 16 GPUs
    ("dgx-2", 150e9, 6.25e9, 16, 16, "switched"),
    ("mi355x-platform", 7 * 76.8e9, 50e9, 8, 8, "full_mesh"),  # 7 links at 153.6 GB/s bidirectional
])
def test_added_system_figures_are_the_datasheets(sid, up, nic, per_node, domain, topology):
    s = system(sid)
    assert s.tier("scale_up").bw_bytes_per_s_per_gpu == pytest.approx(up)
    assert s.tier("scale_out").bw_bytes_per_s_per_gpu == nic
    assert (s.gpus_per_node, s.scale_up_domain, s.tier("scale_up").topology) == (per_node, domain, topology)


def test_every_added_board_has_a_provisional_profile_of_its_die():
    """One profile per device: the same die's fitted profile (H100 SXM5 for the Hopper boards, A100 for A800 and the
    V100s, whose era ran unfused attention, MI300X for CDNA 3/4), read against the board's own peaks."""
    parent = {"GH200-96GB": "H100-SXM5-80GB", "H100-PCIe-80GB": "H100-SXM5-80GB", "H20-96GB": "H100-SXM5-80GB",
              "A800-SXM4-80GB": "A100-SXM4-80GB", "V100-SXM2-32GB": "A100-SXM4-80GB", "MI355X": "MI300X",
              "L40S": "RTX-PRO-6000-Blackwell-Server"}
    for dev in ADDED:
        cal = calibration_for(dev)
        assert cal.name == dev
    for dev, p in parent.items():
        assert calibration_for(dev).matrix_efficiency == calibration_for(p).matrix_efficiency, dev
    assert calibration_for("V100-SXM2-32GB").attention_kernel == "unfused"


def _case(cid, gpu, gpus_per_node, nic=200, gpus=8):
    plan = {"tp": 1, "pp": 1, "dp": gpus, "ep": 1, "cp": 1, "vpp": 1, "mbs": 1, "gbs": 8 * gpus, "zero_stage": 1,
            "recompute": "full", "sequence_parallel": False, "precision": "fp16"}
    return {"id": cid, "source": "synthetic", "kind": "training",
            "model": {"layers": 24, "hidden": 2048, "heads": 16, "kv_heads": 16, "ffn": 8192, "ffn_act": "gelu",
                      "vocab": 51200, "seq_len": 2048},
            "hardware": {"gpu": gpu, "num_gpus": gpus, "gpus_per_node": gpus_per_node, "nic_gbps_per_gpu": nic},
            "plan": plan, "measured": {"step_time_s": 1.0}}


def test_a_corpus_naming_the_added_boards_is_read_and_priced(tmp_path):
    """A validation corpus that names each added board the way its source would is read and priced, and the
    prices follow the boards' physics: the same fp16 run is slower on an H100 PCIe than on the SXM5 board by at
    least their tensor-peak ratio (989.4 / 756 = 1.31; its HBM2e and the PCIe fabric between bridged pairs add to
    it), no slower on a GH200 quad node than on four GPUs of a DGX (same die, faster HBM), and ~2.5x slower on a V100 than on an A100 (312 / 125)."""
    from narrowpath.validate.run import run_validation
    cases = [_case("sxm", "H100-SXM5-80GB", 8), _case("pcie", "NVIDIA H100 PCIe", 2),
             _case("nvl", "H100 NVL 94GB", 2), _case("h200nvl", "H200 NVL", 4), _case("gh200", "GH200-96GB", 4, gpus=4),
             _case("sxm4", "H100-SXM5-80GB", 8, gpus=4),
             _case("l40s", "NVIDIA L40S", 8), _case("h20", "H20", 8), _case("a800", "A800-SXM4-80GB", 8),
             _case("a100", "A100-SXM4-80GB", 8), _case("v100", "Tesla V100-SXM2-32GB", 8, nic=100),
             _case("mi325x", "MI325X", 8), _case("mi355x", "AMD Instinct MI355X", 8)]
    path = tmp_path / "boards.yaml"
    path.write_text(yaml.safe_dump({"schema": "validation-corpus/1", "cases": cases}))
    report = run_validation(path)
    t = {r.id: r.predicted_step_time_s for r in report.cases}
    assert all(r.failure is None for r in report.cases), [(r.id, r.failure) for r in report.cases if r.failure]
    assert 0.95 * 989.4 / 756 < t["pcie"] / t["sxm"] < 2.0
    assert 0.9 < t["gh200"] / t["sxm4"] <= 1.0  # one quad node against four GPUs of a DGX
    assert 1.8 < t["v100"] / t["a100"] < 3.0
    assert t["h20"] > 3 * t["sxm"]  # a fifth of the tensor rate at the same memory bandwidth
    assert t["mi355x"] < t["mi325x"]  # CDNA 4 doubles the matrix rate per CU clock
    hardware = {r.id: r.groups["hardware"][0] for r in report.cases}
    assert (hardware["l40s"], hardware["v100"], hardware["mi355x"]) == ("ada", "volta", "cdna4")


def test_a_format_the_tensor_cores_lack_is_refused_for_training(capsys):
    """Transformer Engine refuses FP8 below compute capability 8.9 and Volta's tensor cores take no BF16: the run is
    refused in one line naming the field (exit 2), not priced at another format's rate; a V100 run that states no
    format is FP16, in predict and serve alike."""
    from narrowpath.cli.main import main
    from tests.cli.one_line import one_line_error
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--gpus", "8", "--precision",
                            "fp8"], "plan.precision: fp8: A100-SXM4-80GB has no FP8 tensor cores")
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "dgx-2", "--gpus", "16", "--precision",
                            "bf16"], "plan.precision: bf16: V100-SXM2-32GB has no BF16 tensor cores")
    one_line_error(capsys, ["serve", "--model", "llama3-8b", "--system", "dgx-2", "--weights", "bf16", "--offline",
                            "--input-len", "64", "--output-len", "16", "--num-requests", "8"],
                   "plan.weight_precision: bf16: V100-SXM2-32GB has no BF16 tensor cores")
    assert main(["predict", "--model", "llama3-8b", "--system", "dgx-2", "--gpus", "16", "--zero", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["precision"] == "fp16"
    assert main(["serve", "--model", "llama3-8b", "--system", "dgx-2", "--offline", "--input-len", "64",
                 "--output-len", "16", "--num-requests", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["plan"]["weight_precision"] == "fp16"
    assert device("L40S").supports("fp8") is None and device("H100-PCIe-80GB").supports("bf16") is None
    assert "no FP8 tensor cores" in device("A100-SXM4-80GB").supports("fp8")
    with pytest.raises(SpecError, match="plan.precision"):  # a scenario file is held to the same rule
        from narrowpath.catalog.resolve import scenario_from_dict
        scenario_from_dict({"model": "llama3-8b", "system": "dgx-2", "num_gpus": 16,
                            "plan": {"dp": 16, "gbs": 64, "precision": "bf16"}})


def test_the_held_out_board_runs_are_read_and_priced():
    """benchmarks/data/heldout-boards.yaml (published training runs on MI355X, A800, GH200 and V100, never used to
    fit anything) is read and every case priced; the A800 run states Megatron-Core 0.6.0, whose Transformer Engine
    layer spec runs fused (flash) attention, so its unstated attention kernel is the stack's, not the A100 profile's
    2021-22 materialised scores (which at sequence 8,192 would not fit: 5·a·s²·b = 10.7 GB per layer)."""
    from pathlib import Path
    from narrowpath.validate.run import run_validation
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "heldout-boards.yaml"
    report = run_validation(path)
    assert len(report.cases) == 4 and all(r.failure is None for r in report.cases)
    a800 = next(r for r in report.cases if r.id.startswith("flagperf-a800"))
    assert a800.chosen["attention"] == "'flash' — default of the megatron-core stack"
    assert {r.groups["hardware"][0] for r in report.cases} == {"cdna4", "ampere", "hopper", "volta"}


def test_every_path_to_a_volta_run_defaults_to_fp16_and_materialised_scores(tmp_path, capsys):
    """A V100 has no BF16 tensor cores and no fused attention kernel: a run that states neither a format nor a
    kernel gets FP16 and the materialised scores on every path — a scenario or serving file moved there with
    --system, a serving file or inference case that leaves the formats out or null, a sweep cell, a training case
    with precision null — and one that states flash attention is refused in one line naming the field."""
    from narrowpath.catalog import model as catalog_model
    from narrowpath.catalog.resolve import scenario_from_dict
    from narrowpath.cli.main import main
    from narrowpath.search.cell import run_cell
    from narrowpath.search.grid import Cell
    from tests.cli.one_line import one_line_error
    assert main(["predict", "llama3-70b-h100-256", "--system", "dgx-2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["precision"] == "fp16" and "no BF16 tensor cores" in out["chosen"]["precision"]
    assert out["plan"]["attention"] == "auto"
    serving = {"model": "llama3-8b", "system": "dgx-h100", "plan": {"tp": 2},
               "workload": {"scenario": "offline", "input_tokens": 64, "output_tokens": 16, "num_requests": 8}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(serving))
    (tmp_path / "v.yaml").write_text(yaml.safe_dump({**serving, "system": "dgx-2",
                                                     "plan": {"tp": 1, "weights_precision": None}}))
    for argv in (["serve", str(tmp_path / "s.yaml"), "--system", "dgx-2", "--json"],
                 ["serve", str(tmp_path / "v.yaml"), "--json"]):
        assert main(argv) == 0, argv
        plan = json.loads(capsys.readouterr().out)["scenario"]["plan"]
        assert (plan["weight_precision"], plan["kv_precision"]) == ("fp16", "fp16"), argv
    scn = scenario_from_dict({"model": "llama3-8b", "system": "dgx-2", "num_gpus": 16,
                              "plan": {"dp": 16, "gbs": 64, "precision": None, "framework": "NeMo 24.07"}},
                             allow_null=True)
    assert (scn.plan.precision, scn.plan.attention) == ("fp16", "auto")  # the NeMo stack's flash does not run
    row = run_cell(Cell(system_label="dgx-2", model_label="llama3-8b", system=system("dgx-2"),
                        model=catalog_model("llama3-8b"), num_gpus=16, gbs=64, objective="time"))
    assert row.get("reason") is None and row["step_time_s"] > 0
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "dgx-2", "--gpus", "16", "--attention",
                            "flash"], "plan.attention: flash: V100-SXM2-32GB runs no fused attention kernel")


def test_the_mx_only_board_refuses_nvfp4_and_the_bridged_nodes_share_their_server(capsys):
    """MI355X's matrix cores run the OCP MX formats, not NVIDIA's NVFP4; a bridged H100 pair is a quarter of an
    8-card server, so its node draws a quarter of the server's non-GPU power (2.8 kW / 4 = 0.7 kW), and a quad
    GH200 node's Grace CPUs are inside the superchips' module power."""
    from narrowpath.catalog.facility import facility_for
    from tests.cli.one_line import one_line_error
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "mi355x-platform", "--gpus", "8", "--gbs",
                            "64", "--precision", "nvfp4"], "plan.precision: nvfp4: MI355X does not run nvfp4")
    assert device("MI355X").supports("mxfp8") is None
    assert facility_for(system("h100-pcie-pair")).node_non_gpu_w == 700
    assert facility_for(system("h200-nvl-quad")).node_non_gpu_w == 1400
    assert facility_for(system("gh200-quad")).node_non_gpu_w < facility_for(system("dgx-h100")).node_non_gpu_w / 2


@pytest.mark.parametrize("framework, stack", [
    ("Megatron-LM core_v0.9.0", "megatron-core"),  # Megatron-LM's release tags
    ("Megatron-LM core_r0.9.0", "megatron-core"),
    ("Megatron-LM (mcore)", "megatron-core"),
    ("Megatron-Core 0.6.0 (FlagPerf)", "megatron-core"),
    ("Megatron-LM", "megatron-lm"),  # unversioned: the 2021-22 runs' own defaults
    ("NeMo 24.07 (NeMo 1.0, Megatron-Core)", "nemo-1"),
    ("Megatron-Bridge / NeMo 26.04 container (BF16)", "megatron-bridge"),
])
def test_a_training_framework_picks_its_stack_however_spelt(framework, stack):
    """Stacks are matched on catalog.store.framework_text of both the case's text and the match words, so a
    release tag's `core_v0` is not read as a version's `v`."""
    from narrowpath.catalog.store import stack_for
    assert stack_for(framework)["id"] == stack
