"""Provenance of a prediction's numbers (STYLE.md #12: provenance travels with numbers): which entries of the
calibration profile it read."""
from __future__ import annotations

from narrowpath.cost.roofline import matrix_table
from narrowpath.spec.calibration import Calibration


def profile_usage(cal: Calibration, dtype: str, tiers: set[str], device: str = "") -> str:
    """Which entries of the calibration profile a prediction read (STYLE.md #12: provenance travels with numbers),
    and a warning when the profile was measured on another device than the one it prices."""
    if matrix_table(dtype, cal):
        pts = matrix_table(dtype, cal)
        matrix = f"matrix {dtype}: measured table ({len(pts)} sizes, {pts[0][1]:.2f}..{pts[-1][1]:.2f})"
    else:
        matrix = f"matrix {dtype}: eff_max {cal.matrix_eff(dtype):.2f}, F_half {cal.matrix_half_flop:.3g} FLOP"
    parts = [matrix, f"HBM eff {cal.vector_bw_efficiency:.2f}", f"kernel overhead {cal.kernel_overhead_s * 1e6:.1f} us"]
    for name in sorted(tiers):
        tc = cal.tier(name)
        table = f", measured busbw table ({len(tc.busbw_efficiency_by_size)} sizes)" if tc.busbw_efficiency_by_size else ""
        parts.append(f"{name}: busbw eff {tc.bw_efficiency:.2f}, alpha {tc.alpha_s * 1e6:.1f} us{table}"
                     + ("" if name in cal.tiers else " (default, not in profile)"))
    other = f" (WARNING: measured on {cal.device}, applied to {device})" if device and cal.device != device else ""
    return f"calibration profile {cal.name}{other} used: " + "; ".join(parts)
