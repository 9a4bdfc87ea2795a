"""Shipped profiles are data with sources: refitting the public points reproduces their figures."""
from __future__ import annotations

import pytest

from narrowpath.catalog.resolve import calibration_from
from narrowpath.measure.shipped import fit_public_points, load_public_points


def test_every_point_set_has_a_source():
    for entry in load_public_points():
        for item in [*entry.get("gemm", ()), *entry.get("collectives", ())]:
            assert item.get("source"), (entry["device"], item)


@pytest.mark.parametrize("device,figures", sorted(fit_public_points().items()))
def test_refit_matches_the_shipped_profile(device, figures):
    """Each refitted figure equals the catalog profile's within rounding (0.01)."""
    cal = calibration_from(device)
    for key, value in figures.items():
        kind, name, *_ = key.split(".")
        shipped = cal.matrix_efficiency[name] if kind == "matrix_efficiency" else cal.tiers[name].bw_efficiency
        assert value == pytest.approx(shipped, abs=0.01), key
