"""The collectives probe runs real gloo ranks (2 and 4) and reports nccl-tests-convention numbers."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from narrowpath.measure.busbw import bus_factor  # noqa: E402
from narrowpath.measure.collectives_probe import probe_collectives  # noqa: E402
from narrowpath.errors import NarrowpathError  # noqa: E402


@pytest.mark.parametrize("num_ranks", [2, 4])
def test_gloo_ranks(num_ranks):
    r = probe_collectives(num_ranks=num_ranks, quick=True, max_bytes=65536, progress=False)
    assert r["backend"] == "gloo" and r["num_ranks"] == num_ranks and r["tier"] == "scale_up"
    assert {s["op"] for s in r["samples"]} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                               "send_recv"}
    for s in r["samples"]:
        assert math.isfinite(s["time_s"]) and s["time_s"] > 0
        assert s["count"] % num_ranks == 0 and s["size_bytes"] == 4 * s["count"]
        assert s["algbw_bytes_per_s"] == pytest.approx(s["size_bytes"] / s["time_s"])
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"] * bus_factor(s["op"], num_ranks))
    for op, f in r["fits"].items():
        assert f["alpha_s"] >= 0 and f["busbw_bytes_per_s"] > 0, op


def test_bad_op_and_rank_count():
    with pytest.raises(NarrowpathError, match="unknown collective"):
        probe_collectives(ops=("allreduce",))
    with pytest.raises(NarrowpathError, match="at least 2"):
        probe_collectives(num_ranks=1)
