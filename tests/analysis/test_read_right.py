"""Numbers that read wrong to a practitioner (issue 14 part 4, two items of issue 11): each test failed on the code
before the fix and states the rule the number now follows."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.cli.main import main
from tests.analysis.conftest import scenario_from_flags

FAT_TREE_4_TO_1 = {
    "name": "llama3-70b-on-a-4:1-fat-tree",
    "system": {"name": "h100-fat-tree-4to1", "device": "H100-SXM5-80GB", "gpus_per_node": 8, "tiers": [
        {"name": "scale_up", "bw_bytes_per_s_per_gpu": 450e9, "domain_size": 8, "latency_s": 2e-6,
         "in_network_reduction": True},
        {"name": "scale_out", "bw_bytes_per_s_per_gpu": 50e9, "latency_s": 5e-6, "oversubscription": 4.0,
         "topology": "fat_tree"},
        {"name": "front_end", "bw_bytes_per_s_per_gpu": 12.5e9, "latency_s": 2e-5}]},
    "model": "llama3-70b", "num_gpus": 1024,
    "plan": {"tp": 8, "pp": 1, "dp": 128, "mbs": 1, "gbs": 256, "zero_stage": 3, "recompute": "full",
             "sequence_parallel": True, "precision": "bf16", "dp_overlap": True},
}


def _cli_json(argv: list[str]) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def test_busiest_link_utilisation_is_a_fraction_on_an_oversubscribed_fat_tree():
    """ZeRO-3 over 128 nodes of a 4:1 fat tree read "busiest-link util 214 %" (every byte × 4 on the uplinks).
    With the flows laid on the fabric, each leaf (4 nodes) sends 8 rail rings up: 8 × B over 32 × 50 GB/s / 4 is
    exactly one NIC's B over 50 GB/s, so the busiest link is the NIC and its utilisation is B / (50 GB/s × step)."""
    a = analyze(scenario_from_dict(FAT_TREE_4_TO_1))
    out = {t.tier: t for t in a.topology.tiers}["scale_out"]
    assert 0 <= out.utilisation <= 1
    assert out.busiest_link == "NIC" and not out.saturated
    assert out.utilisation == pytest.approx(out.bytes_per_step / (50e9 * a.prediction.step_time_s), rel=1e-9)
    for t in a.topology.tiers:
        assert 0 <= t.utilisation <= 1 and 0 <= t.busy_fraction <= 1


def test_scale_out_time_is_charged_when_bytes_cross_the_nics():
    """Llama-3 8B on 4,096 GPUs moves GBs per GPU over the NICs per step; the ledger read "scale_out modelled
    0.00 ms" because the hierarchical all-reduce was booked on NVLink. Each tier carrying bytes is charged time,
    and the network tiers together are the transfers' time."""
    a = analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "4096"]))
    rows = {r.level: r for r in a.data_movement}
    assert rows["scale_out"].bytes_per_step > 1e9
    assert rows["scale_out"].modelled_s > 0.01
    total = sum(t.total_s for t in a.prediction.transfers)
    assert rows["scale_up"].modelled_s + rows["scale_out"].modelled_s == pytest.approx(total, rel=1e-9)
    assert {t.tier: t for t in a.topology.tiers}["scale_out"].busy_fraction > 0


def test_energy_is_reported_at_gpu_node_cluster_and_facility_levels():
    """"Whole job" energy was GPUs only (~481 W per H100). Levels now add the rest of each node, the scale-out
    switches and the building's PUE, each labelled with its source; every level includes the ones before."""
    doc = _cli_json(["analyze", "--json", "--no-what-ifs"])
    e = doc["energy"]
    levels = {lv["level"]: lv for lv in e["levels"]}
    assert list(levels) == ["gpu", "node", "cluster", "facility"]
    assert levels["gpu"]["total_j"] == pytest.approx(e["total_j"])
    step = doc["prediction"]["step_time_s"]
    nodes, n = 32, 256
    assert levels["node"]["total_j"] == pytest.approx(e["total_j"] + 2800 * nodes * step)  # 8.4 kW − 8 × 700 W
    assert levels["cluster"]["total_j"] > levels["node"]["total_j"]
    assert levels["facility"]["total_j"] == pytest.approx(levels["cluster"]["total_j"] * 1.2)
    assert levels["facility"]["power_w"] / n > 1.5 * e["avg_power_per_gpu_w"]
    for lv in levels.values():
        assert lv["source"] and lv["added"]
        assert lv["per_token_j"] == pytest.approx(lv["total_j"] / (doc["prediction"]["tokens_per_s"] * step))


def test_checkpoint_write_goes_through_shared_storage():
    """988 GB "written in 0.49 s" assumed 2 TB/s of storage for 256 GPUs. The storage is the cluster's per-GPU
    provisioning (Llama 3: 2 TB/s for 16,384 GPUs = 122 MB/s per GPU) shared by all writers, behind the front-end
    NICs, after each writer stages its shard through host memory: 988 GB / (256 × 122 MB/s) ≈ 32 s."""
    a = analyze(load_scenario("llama3-70b-h100-256"))
    c = a.synchronisation.checkpoint
    f = a.synchronisation.failures
    storage = 256 * 2e12 / 16384
    assert c.storage_write_bw_bytes_per_s == pytest.approx(storage, rel=1e-2)
    assert c.writers == 256  # ZeRO-1: every rank holds a distinct optimizer shard
    serialise = c.checkpoint_bytes / 256 / 50e9  # shard over the PCIe Gen5 host link
    assert f.write_s == pytest.approx(serialise + c.checkpoint_bytes / storage, rel=1e-2)
    assert f.write_s > 25 and c.bottleneck == "storage"
    assert f.restore_s == pytest.approx(c.checkpoint_bytes / (256 * 7e12 / 16384) + serialise, rel=1e-2)


def test_gnmt_verdict_and_persistence_agree():
    """GNMT: the verdict names memory-bound kernels; the persistent-kernel what-if is tried against them and its
    gain is exactly the persistence table's step gain at the scenario's hidden size, named in the verdict."""
    a = analyze(load_scenario("gnmt-lstm-a100-8"))
    v = a.verdict
    assert v.narrowest == "hbm_bound_compute"
    w = {w.change: w for w in v.what_ifs}["persistent_rnn"]
    point = [q for q in a.distance.persistence.points if q.hidden == a.prediction.scenario.model.hidden]
    if not point:
        from narrowpath.analysis.persistence import persistence_cliff
        point = persistence_cliff(a.prediction.scenario, 0.75, (a.prediction.scenario.model.hidden,)).points
    assert w.status == "faster" and "hbm_bound_compute" in w.targets
    assert w.gain_s == pytest.approx(point[0].core_step_s - point[0].step_s, rel=1e-9)
    assert w.gain_s < v.components_s["hbm_bound_compute"]  # it removes part of the HBM-bound time, not more
    assert "persistent recurrent kernels" in v.sentence and f"{w.gain_s:.3g} s" in v.sentence


def test_slow_node_flag_is_a_percentage():
    """`--slow-node 20` meant 2000 % while the help said "fraction (0 to 100)": it is percent now, stated in the
    help, stored as a fraction in the JSON."""
    doc = _cli_json(["analyze", "--json", "--no-what-ifs", "--slow-node", "20"])
    s = doc["synchronisation"]
    assert s["slow_node_fraction"] == pytest.approx(0.20)
    p = doc["prediction"]
    expect = p["step_time_s"] + 0.20 * (p["breakdown_s"]["compute"] + p["breakdown_s"]["bubble"])
    assert s["slow_node_step_s"] == pytest.approx(expect)
    assert main(["analyze", "--slow-node", "2000"]) == 2


def test_strong_scaling_shows_every_size_with_its_reason():
    """Llama-3 405B strong scaling dropped 32k–131k GPUs silently (8 micro-batches no longer divide by PP 16 for
    interleaving). Every size is listed: repaired (fewer virtual stages, said in the note) or with the reason."""
    a = analyze(load_scenario("llama3-405b-h100-16k"))
    strong = [s for s in a.scaling if s.mode == "strong"]
    assert [s.num_gpus for s in strong] == [4096, 8192, 16384, 32768, 65536, 131072]
    for s in strong:
        if s.num_gpus > 16384:
            assert s.note.startswith("vpp 8 -> 1") and s.step_s is not None
    one = analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "1"]))
    missing = [s for s in one.scaling if s.step_s is None]
    assert missing and all(s.note.startswith("no valid plan:") for s in missing)


def test_activations_never_could_live_nearer():
    """Activations persist from a layer's forward to its backward; a small per-layer share (7.7 MB here, which
    fits H100 SRAM) read as "could live in sram"."""
    a = analyze(scenario_from_flags(["--model", "gpt-1.7b", "--system", "dgx-h100", "--gpus", "8", "--tp", "8",
                                     "--seq-len", "256", "--gbs", "8"]))
    acts = {i.item: i for i in a.distance.items}["activations"]
    assert acts.working_set_bytes < 0.75 * 63.9e6 and acts.nearer_level == ""


def test_mfu_is_shown_under_both_attention_conventions():
    """HFU below MFU confused readers: MFU counts every attention score, the executed causal flash kernel half.
    predict shows both MFU conventions, named; the causal one removes half of the attention FLOPs, here
    12·gbs·s²·L·h (Korthikanti et al. 2022 §6, the s/(6h) term of 72·B·s·L·h²)."""
    p = _cli_json(["predict", "--json"])
    gbs, s, layers, h = 512, 8192, 80, 8192
    attention = 12 * gbs * s**2 * layers * h
    assert p["mfu_causal"] == pytest.approx(p["mfu"] * (1 - 0.5 * attention / p["model_flop_per_step"]), rel=1e-6)
    assert p["hfu"] < p["mfu"] and set(p["flop_conventions"]) == {"mfu", "mfu_causal", "hfu"}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["predict"])
    assert "causal" in buf.getvalue() and "HFU" in buf.getvalue()


def test_distance_budget_says_why_its_sizes_differ_from_the_memory_table():
    """Issue 11: the memory table (stage 0, most loaded) and the distance budget (stage 3, critical) showed
    activations/temporaries 25.95/0.00 vs 19.13/0.79 GB without saying why."""
    a = analyze(load_scenario("llama3-70b-h100-256"))
    d = a.distance
    mem = a.prediction.memory_by_stage[d.stage].items
    got = {i.item: i.bytes_per_rank for i in d.items}
    assert got["activations"] == pytest.approx(mem["activations"]) and got["temporaries"] == pytest.approx(
        mem["temporaries"])
    assert (d.stage, d.memory_stage) == (3, 0)
    top = a.prediction.memory.items
    acts = f"activations {mem['activations'] / 1e9:.2f} GB here vs {top['activations'] / 1e9:.2f} GB"
    for needle in ("stage 3", "stage 0", acts, "logits"):
        assert needle in d.stage_note
    from narrowpath.report.analysis_console import format_analysis
    assert d.stage_note in format_analysis(a)


def test_scaling_plot_minor_tick_labels_do_not_overlap():
    """Issue 11: the scaling plot's minor-tick labels overlapped on the log axes. No two visible y tick labels of
    one axis share a pixel once the figure is drawn."""
    from narrowpath.report.plots import scaling_figure
    for name in ("llama3-70b-h100-256", "llama3-8b-h100-8", "gnmt-lstm-a100-8"):
        fig = scaling_figure(analyze(load_scenario(name)))
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        for ax in fig.axes:
            boxes = [t.get_window_extent(r) for t in ax.yaxis.get_ticklabels(minor=True) + ax.yaxis.get_ticklabels()
                     if t.get_text() and t.get_visible()]
            for i, b in enumerate(boxes):
                assert not any(b.overlaps(o) for o in boxes[i + 1:]), (name, ax.get_title())
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_the_topology_fit_counts_both_legs_of_a_deduplicating_dispatch():
    """DeepSeek-V3's expert exchange (dedup dispatch: across nodes once per destination node, then over NVLink) is
    priced on the `ep_inter` / `ep_intra` legs; the topology fit's ep row read 0.00 GB/step per GPU ("per-layer
    traffic (0.00 GB/step per GPU) crosses scale_out"). It now holds both legs' bytes, each on its own tier."""
    a = analyze(load_scenario("deepseek-v3-h800-2048"))
    ep = {f.axis: f for f in a.topology.axes}["ep"]
    legs = {t.name: t for t in a.prediction.transfers if t.axis in ("ep_inter", "ep_intra")}
    assert set(legs) == {"ep.dispatch_internode", "ep.combine_internode", "ep.dispatch_intranode",
                         "ep.combine_intranode"}  # FP8 dispatch, BF16 combine (DeepSeek-V3 §3.3.2)
    assert ep.bytes_per_step["scale_out"] > 1e11 and ep.bytes_per_step["scale_up"] > 1e11
    flag = next(f for f in a.topology.flags if f.startswith("EP groups"))
    assert "(0.00 GB" not in flag
