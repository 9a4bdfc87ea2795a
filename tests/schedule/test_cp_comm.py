"""Context-parallel K/V exchange types (Megatron-Core --cp-comm-type): ring p2p hides behind attention,
all-gather (Llama 3) and all-to-all (Ulysses) sit on the critical path."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict


def _scn(**plan):
    s = load_scenario(None)  # llama3-70b on 256 H100: 64 heads, 8 kv heads, seq 8192
    # tp·cp = 8 divides the 8 kv heads, as the a2a type needs
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=4, pp=4, vpp=5, cp=2, dp=8, **plan))


def _cp(pred):
    return [t for t in pred.transfers if t.axis == "cp"]


def test_ring_is_overlapped_and_gather_types_are_exposed():
    ring, gather, a2a = (predict(_scn(cp_comm=c)) for c in ("p2p", "all_gather", "a2a"))
    assert all(t.op in ("all_gather", "reduce_scatter") for t in _cp(ring))
    assert all(t.exposed_s == pytest.approx(t.total_s) for t in _cp(gather) + _cp(a2a))
    assert {t.op for t in _cp(a2a)} == {"all_to_all"}
    # the exposed types can only cost time relative to a ring that hides at least part of its traffic
    assert gather.step_time_s >= ring.step_time_s * (1 - 1e-12)
    assert gather.breakdown_s["exposed_cp_comm"] > ring.breakdown_s["exposed_cp_comm"]


def test_a2a_moves_q_k_v_and_output_in_both_passes():
    pred = predict(_scn(cp_comm="a2a", recompute="none"))
    names = {(t.name, t.phase) for t in _cp(pred)}
    assert names == {(n, ph) for n in ("cp.qkv_all_to_all", "cp.attn_out_all_to_all") for ph in ("fwd", "bwd")}
    m = pred.scenario.model
    qkv = next(t for t in _cp(pred) if t.name == "cp.qkv_all_to_all")
    out = next(t for t in _cp(pred) if t.name == "cp.attn_out_all_to_all")
    assert qkv.message_bytes / out.message_bytes == pytest.approx((m.q_dim + 2 * m.kv_dim) / m.q_dim)


def test_a2a_needs_heads_divisible_by_tp_cp():
    with pytest.raises(SpecError, match="plan.cp_comm"):
        s = load_scenario(None)
        dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=8, pp=2, vpp=5, cp=16, dp=1, gbs=64,
                                                        cp_comm="a2a"))


def test_cli_flag_and_bad_value(capsys):
    assert main(["predict", "--cp", "2", "--cp-comm", "all_gather", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"cp_comm": "all_gather"' in out
    with pytest.raises(SystemExit) as e:
        main(["predict", "--cp-comm", "ring"])
    assert e.value.code == 2
    assert "--cp-comm" in capsys.readouterr().err
