"""Numbers no real job has are refused naming the field: NaN, infinities, absurd sizes."""
from __future__ import annotations

import dataclasses
import math

import pytest

from narrowpath.catalog import calibration_for, model, system
from narrowpath.cost.collectives import collective_time
from narrowpath.errors import SpecError
from narrowpath.network.placement import group_span
from narrowpath.spec import Plan
from narrowpath.spec.calibration import TierCalibration
from narrowpath.spec.system import Tier


@pytest.mark.parametrize("field,value", [("layers", 10 ** 30), ("seq_len", 10 ** 20), ("hidden", 10 ** 12),
                                         ("vocab", 10 ** 12)])
def test_model_sizes_are_bounded(field, value):
    with pytest.raises(SpecError, match=f"model.{field}"):
        dataclasses.replace(model("llama3-8b"), **{field: value})


@pytest.mark.parametrize("points", [[[1e9, math.nan], [1e12, 0.5]], [[math.inf, 0.5]], [[1e9, 1.5]], [[0, 0.5]],
                                    [[1e9]]])
def test_matrix_efficiency_table_points_checked(points):
    cal = calibration_for("H100-SXM5-80GB")
    with pytest.raises(SpecError, match="matrix_efficiency_by_size.bf16"):
        dataclasses.replace(cal, matrix_efficiency_by_size={"bf16": points})


def test_busbw_efficiency_table_points_checked():
    with pytest.raises(SpecError, match="busbw_efficiency_by_size"):
        TierCalibration(bw_efficiency=0.9, alpha_s=5e-6, busbw_efficiency_by_size=((1e6, math.nan),))


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.5])
def test_oversubscription_must_be_finite_and_at_least_one(value):
    with pytest.raises(SpecError, match="oversubscription"):
        Tier(name="scale_out", bw_bytes_per_s_per_gpu=50e9, oversubscription=value)


def test_collective_time_refuses_nan_bytes():
    sys_ = system("dgx-h100")
    span = group_span(Plan(tp=8, dp=2, gbs=2), sys_, "dp")
    with pytest.raises(SpecError, match="message_bytes"):
        collective_time("all_reduce", math.nan, span, sys_, calibration_for("H100-SXM5-80GB"))


@pytest.mark.parametrize("gbs", [10 ** 47, 1.0e47, (1 << 30) + 1])
def test_global_batch_is_bounded_like_the_gpu_count(gbs):
    """`plan.gbs: 1.0e+47` priced a step of 3.7e45 s; above MAX_BATCH (2^30 sequences) it is refused."""
    with pytest.raises(SpecError, match=r"plan.gbs: must be <= 1,073,741,824"):
        Plan(gbs=gbs)


def test_largest_global_batch_is_accepted():
    from narrowpath.spec.plan import MAX_BATCH
    assert Plan(gbs=MAX_BATCH).gbs == MAX_BATCH


def test_efficiency_tables_are_read_in_ascending_size_and_a_size_twice_is_refused():
    """np.interp needs ascending sizes: a table written largest-first prices like the same table sorted."""
    up = TierCalibration(bw_efficiency=0.9, alpha_s=5e-6, busbw_efficiency_by_size=((1e9, .8), (1e6, .5)))
    assert up.busbw_efficiency_by_size == ((1e6, .5), (1e9, .8))
    with pytest.raises(SpecError, match="busbw_efficiency_by_size.*size 1e\\+06 more than once"):
        TierCalibration(bw_efficiency=0.9, alpha_s=5e-6, busbw_efficiency_by_size=((1e6, .5), (1e6, .6)))
