"""Provenance of a prediction's numbers (STYLE.md #12: provenance travels with numbers): which entries of the
calibration profile it read."""
from __future__ import annotations

from narrowpath.cost.power import clock_fraction
from narrowpath.cost.roofline import flash_head_dim_rate, flash_phase_note, matrix_table
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


def attention_note(scn, kernel: str) -> str:
    """The attention kernel a prediction priced, and how: the profile's default or the plan's, FlashAttention-2's
    share of the fused kernel's rate, the head width's rate, the fitted split between the passes."""
    plan = scn.plan
    out = f"attention kernel: {kernel}" + (" (profile default)" if plan.attention == "auto" else "")
    if plan.attention == "flash2":
        out += f" as FlashAttention-2 ({_fa2_note(scn.system.device)})"
    elif kernel == "flash":
        out += _head_width_note(scn.model.qk_head_dim)
    return out + (flash_phase_note() if kernel == "flash" else "")


def _fa2_note(device) -> str:
    if not device.flash2_rate:
        return f"priced as the fused kernel on {device.name}"
    return (f"forward {device.flash2_share('fwd'):.2f}, backward {device.flash2_share('bwd'):.2f} of the fused "
            f"kernel's rate")


def _head_width_note(head_dim: float) -> str:
    """How the flash kernel's head width rates it, when it is not the profile's 128 (cost.roofline)."""
    if not head_dim or head_dim == 128:
        return ""
    return (f"; head width {head_dim:g}: {flash_head_dim_rate(head_dim, 'fwd'):.2f} of the profile's 128-wide rate "
            f"forward, {flash_head_dim_rate(head_dim, 'bwd'):.2f} backward (cuDNN, FlashAttention-3 Figs. 5-6)")


def power_notes(system) -> tuple[str, ...]:
    """The system's power cap and what it does to the arithmetic (cost.power), when it has one."""
    cap, dev = system.power_limit_w, system.device
    if not cap:
        return ()
    f = clock_fraction(dev.tdp_w, dev.idle_w, cap)
    if f >= 1.0:
        why = "unknown rating" if not dev.tdp_w else f"at or above the rated {dev.tdp_w:g} W"
        return (f"power cap {cap:g} W per GPU: no effect ({why})",)
    return (f"power cap {cap:g} W per GPU of the rated {dev.tdp_w:g} W: matrix and vector arithmetic at {f:.1%} of "
            "the rated clock (cost.power), HBM bandwidth unchanged; MFU stays against the rated peak",)
