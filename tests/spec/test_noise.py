"""The --noise grammar and its one-line errors naming the field."""
from __future__ import annotations

import pytest

from narrowpath.errors import SpecError
from narrowpath.spec.noise import IB_RETRANSMIT_TIMEOUT_S
from narrowpath.spec.noise_parse import LLAMA3_COUNTS, llama3_mtbf_h, noise_from_mapping, parse_noise


def test_the_issue_forms_parse():
    n = parse_noise(["jitter=lognormal:0.05", "slow-node=1:0.2,link-flap=scale_out:0.01"])
    assert (n.jitter.dist, n.jitter.cv) == ("lognormal", 0.05)
    assert n.slow[0].kind == "node" and n.slow[0].ids == (1,) and n.slow[0].fraction == 0.2
    assert n.flaps[0].tier == "scale_out" and n.flaps[0].prob == 0.01
    assert n.flaps[0].penalty_s == IB_RETRANSMIT_TIMEOUT_S
    assert n.causes() == ("jitter", "slow-node", "link-flap") and n.step_noise and n.failures is None


def test_every_item_and_units():
    n = parse_noise(["jitter=pareto:0.1:3,slow-gpu=3+17:0.5,slow-link=scale_up:0.3:4,link-flap=scale_up:0.5:20ms",
                     "gc=30s:200ms:aligned,data-loader=2min:1s,fail=gpu:50000,fail=node:2d,detect=2min,restart=90s,"
                     "checkpoint-every=30min,horizon=7d,maintenance=24h,storage=1e12"])
    assert n.jitter.alpha == 3 and n.slow[0].ids == (3, 17)
    assert n.slow_links[0].rank == 4 and n.flaps[0].penalty_s == pytest.approx(0.02)
    gc, dl = n.interference
    assert (gc.period_s, gc.pause_s, gc.aligned) == (30, 0.2, True) and (dl.period_s, dl.aligned) == (120, False)
    f = n.failures
    assert dict(f.mtbf_h) == {"gpu": 50000, "node": 48}
    assert (f.detect_s, f.restart_s, f.checkpoint_interval_s, f.horizon_s) == (120, 90, 1800, 7 * 86400)
    assert f.maintenance_every_s == 86400 and f.storage_bw_bytes_per_s == 1e12


def test_yaml_mapping_forms():
    n = noise_from_mapping({"jitter": {"dist": "normal", "cv": 0.02}, "slow-node": ["1:0.1", "2:0.3"],
                            "fail": "llama3", "horizon": "54d"})
    assert n.jitter.dist == "normal" and len(n.slow) == 2 and n.failures.horizon_s == 54 * 86400


def test_llama3_preset_reproduces_table_5_counts():
    """Per-component MTBFs × population × 54 days give back Dubey et al. 2024 Table 5's 419 unexpected."""
    pop = {"gpu": 16384, "node": 2048, "link": 16384, "software": 16384}
    counts = {c: pop[c] * 54 * 24 / h for c, h in llama3_mtbf_h()}
    assert counts == pytest.approx(LLAMA3_COUNTS) and sum(LLAMA3_COUNTS.values()) == 419


@pytest.mark.parametrize("spec,field", [
    ("jitter=gauss:0.1", "noise.jitter"),
    ("jitter=normal:-0.1", "noise.jitter.cv"),
    ("jitter=normal:0.5", "noise.jitter.cv"),
    ("jitter=pareto:0.1:1.5", "noise.jitter.alpha"),
    ("jitter=normal", "noise.jitter"),
    ("slow-node=x:0.2", "noise.slow-node"),
    ("slow-node=1:-0.2", "noise.slow-node.fraction"),
    ("link-flap=scale_out:1.5", "noise.link-flap.prob"),
    ("link-flap=scale_out:-0.1", "noise.link-flap.prob"),
    ("link-flap=nvlink:0.1", "noise.link-flap.tier"),
    ("gc=1:2", "noise.gc.pause_s"),
    ("gc=10:1:sometimes", "noise.gc.phase"),
    ("fail=gpu:-5", "noise.fail.gpu"),
    ("fail=toaster:5", "noise.fail"),
    ("horizon=forever", "noise.horizon"),
    ("bogus=1", "noise"),
    ("jitter", "noise"),
])
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(SpecError) as exc:
        parse_noise([spec])
    assert exc.value.field == field
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("specs, field", [
    (["fail=gpu:1000,horizon=1d", "horizon=2d"], "noise.horizon"),
    (["detect=1min,detect=2min"], "noise.detect"),
    (["jitter=normal:0.1", "jitter=normal:0.2"], "noise.jitter"),
])
def test_an_item_given_twice_is_refused_not_overridden(specs, field):
    """A repeated scalar item (horizon, detect, …) was silently overridden, the last one winning, while a repeated
    jitter or fail class was refused (fifty-sixth session's review)."""
    with pytest.raises(SpecError, match="given twice") as exc:
        parse_noise(specs)
    assert exc.value.field == field
