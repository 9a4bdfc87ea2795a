"""The shipped calibration figures, refitted from the public measurements in `public_points.yaml`.

Uses the fitting code of `narrowpath calibrate` (`fit.fit_matrix_ramp`, `profile.large_message_busbw`) with
the catalog's peaks and line rates, so a shipped profile is data with sources produced the same way as a
measured one. Returns {device: {"matrix_efficiency.<dtype>": value, "tiers.<tier>.bw_efficiency": value}}.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from narrowpath.measure.busbw import bus_factor
from narrowpath.measure.fit import fit_matrix_ramp
from narrowpath.measure.profile import large_message_busbw
from narrowpath.spec.strict_load import load_yaml

POINTS_PATH = Path(__file__).with_name("public_points.yaml")


def load_public_points(path: Path = POINTS_PATH) -> list[dict[str, Any]]:
    return load_yaml(path.read_text())["devices"]


def fit_public_points(path: Path = POINTS_PATH) -> dict[str, dict[str, float]]:
    """Refit every device's figures from its public points."""
    from narrowpath.catalog import store
    out: dict[str, dict[str, float]] = {}
    for entry in load_public_points(path):
        device, system = store.device(entry["device"]), store.system(entry["system"])
        figures: dict[str, float] = {}
        for dtype in dict.fromkeys(g["dtype"] for g in entry.get("gemm", ())):
            pts = [g for g in entry["gemm"] if g["dtype"] == dtype]
            ramp = fit_matrix_ramp([2.0 * g["m"] * g["n"] * g["k"] for g in pts],
                                   [float(g["flops_per_s"]) for g in pts])
            figures[f"matrix_efficiency.{dtype}"] = ramp.rate_flop_per_s / device.matrix_peak(dtype)
        for c in entry.get("collectives", ()):
            factor = bus_factor(c["op"], c["num_ranks"])
            sizes = [float(s) for s, _ in c["points"]]
            times = [s * factor / float(b) for s, b in c["points"]]  # time that gives the quoted busbw
            busbw = large_message_busbw(c["op"], c["num_ranks"], sizes, times)
            line = system.tier(c["tier"]).bw_bytes_per_s_per_gpu * c.get("rails", 1)
            figures[f"tiers.{c['tier']}.bw_efficiency"] = busbw / line
        out[entry["device"]] = figures
    return out
