"""Fits of measured points to the cost model's forms, each with its residual.

Both forms are a line in (size, time), fitted by least squares on relative error (weights 1/t², so small and
large sizes count alike, as in the LogP/α-β fitting practice of Hoefler et al., 'LogGP in theory and practice',
2009):
- α-β (Hockney 1994): t(S) = a + b·S. For a ring collective (Thakur, Rabenseifner & Gropp 2005)
  a = steps·α and b = factor / busbw, with steps and factor from `busbw.py`.
- two-regime α-β (`fit_alpha_beta_knee`): t(S) = a + b·min(S, K) + b'·max(S − K, 0), b' ≥ b — the same line up
  to a knee K, then a larger per-byte cost. Physical reason on a host (gloo over loopback TCP): every byte of a
  collective is copied user buffer → socket buffer → user buffer, and those copies run at cache bandwidth
  while the op's buffers fit in the last cache the cores hold, at DRAM bandwidth beyond it; the in-cache and
  beyond-cache parts are two α-β "tiers" of one op. K is the fitted size where the buffers leave the cache (a
  candidate among the measured sizes); with b' = b it is the one-line fit.
- GEMM ramp: attained(F) = R∞ · F / (F + F½), i.e. t(F) = F½/R∞ + F/R∞ — a fixed cost plus a peak-rate part;
  F½ is `Calibration.matrix_half_flop`, R∞/peak is `Calibration.matrix_efficiency`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from narrowpath.errors import NarrowpathError
from narrowpath.measure.busbw import bus_factor, ring_steps


@dataclass(frozen=True, slots=True)
class LineFit:
    """t = intercept_s + slope_s_per_unit · x, with the RMS relative residual over the fitted points."""

    intercept_s: float
    slope_s_per_unit: float
    rms_rel_residual: float
    num_points: int

    def predict_s(self, x: float) -> float:
        return self.intercept_s + self.slope_s_per_unit * x


def rms_rel_residual(predicted: Sequence[float], measured: Sequence[float]) -> float:
    return math.sqrt(sum(((p - m) / m) ** 2 for p, m in zip(predicted, measured)) / max(1, len(measured)))


def fit_line_rel(x: Sequence[float], t: Sequence[float]) -> LineFit:
    """Least squares of t = a + b·x on relative error, with a ≥ 0 and b ≥ 0 (refits a line through 0 if a < 0)."""
    if len(x) != len(t) or not x:
        raise NarrowpathError(f"fit needs matching non-empty x and t, got {len(x)} and {len(t)} points")
    if any(v <= 0 or not math.isfinite(v) for v in t):
        raise NarrowpathError(f"fit needs positive finite times, got {list(t)}")
    w = [1.0 / v ** 2 for v in t]
    sw = sum(w)
    sx = sum(wi * xi for wi, xi in zip(w, x))
    sxx = sum(wi * xi * xi for wi, xi in zip(w, x))
    st = sum(wi * ti for wi, ti in zip(w, t))
    sxt = sum(wi * xi * ti for wi, xi, ti in zip(w, x, t))
    det = sw * sxx - sx * sx
    if len(set(x)) < 2 or det <= 0:
        a, b = 0.0, sxt / sxx
    else:
        a = (sxx * st - sx * sxt) / det
        b = (sw * sxt - sx * st) / det
        if a < 0:
            a, b = 0.0, sxt / sxx
        elif b < 0:
            a, b = st / sw, 0.0
    pred = [a + b * xi for xi in x]
    return LineFit(a, b, rms_rel_residual(pred, t), len(x))


@dataclass(frozen=True, slots=True)
class AlphaBeta:
    """α-β parameters of one collective on one group."""

    op: str
    num_ranks: int
    alpha_s: float
    """Latency per ring step, seconds."""
    busbw_bytes_per_s: float
    """Asymptotic bus bandwidth (nccl-tests convention), bytes/s."""
    fit: LineFit

    def predict_s(self, size_bytes: float) -> float:
        return self.fit.predict_s(size_bytes)


def fit_alpha_beta(op: str, num_ranks: int, size_bytes: Sequence[float], time_s: Sequence[float]) -> AlphaBeta:
    """α and busbw of `op` from (nccl-tests size, time) points."""
    line = fit_line_rel(size_bytes, time_s)
    busbw = bus_factor(op, num_ranks) / line.slope_s_per_unit if line.slope_s_per_unit > 0 else math.inf
    return AlphaBeta(op, num_ranks, line.intercept_s / ring_steps(op, num_ranks), busbw, line)


@dataclass(frozen=True, slots=True)
class KneeFit:
    """Two-regime α-β: t = intercept + slope·min(S, knee) + slope_beyond·max(S − knee, 0).

    knee_bytes is None when one line fits best (slope_beyond == slope)."""

    intercept_s: float
    slope_s_per_byte: float
    slope_beyond_s_per_byte: float
    knee_bytes: float | None
    rms_rel_residual: float
    num_points: int

    def predict_s(self, size_bytes: float) -> float:
        if self.knee_bytes is None or size_bytes <= self.knee_bytes:
            return self.intercept_s + self.slope_s_per_byte * size_bytes
        return (self.intercept_s + self.slope_s_per_byte * self.knee_bytes
                + self.slope_beyond_s_per_byte * (size_bytes - self.knee_bytes))


def _wls3(cols: list[list[float]], t: Sequence[float]) -> list[float] | None:
    """Least squares on relative error (weights 1/t²) of t = Σ p_j·cols[j]; None if singular."""
    k = len(cols)
    w = [1.0 / v ** 2 for v in t]
    m = [[sum(wi * ci * cj for wi, ci, cj in zip(w, cols[a], cols[b])) for b in range(k)] for a in range(k)]
    v = [sum(wi * ci * ti for wi, ci, ti in zip(w, cols[a], t)) for a in range(k)]
    for c in range(k):  # Gauss-Jordan with partial pivoting
        piv = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[piv][c]) < 1e-300:
            return None
        m[c], m[piv], v[c], v[piv] = m[piv], m[c], v[piv], v[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
                v[r] -= f * v[c]
    return [v[i] / m[i][i] for i in range(k)]


def fit_line_knee(size_bytes: Sequence[float], time_s: Sequence[float], *, min_beyond: int = 1) -> KneeFit:
    """Two-regime α-β on relative error: the knee is chosen among the measured sizes (at least `min_beyond`
    points beyond it, at least 3 up to it) to minimise the weighted residual; a knee is kept only when
    a ≥ 0 and 0 < b ≤ b'. Falls back to `fit_line_rel` (knee None) when no knee does better."""
    line = fit_line_rel(size_bytes, time_s)
    x, t = list(size_bytes), list(time_s)
    best = KneeFit(line.intercept_s, line.slope_s_per_unit, line.slope_s_per_unit, None, line.rms_rel_residual,
                   len(x))
    for knee in sorted(set(x)):
        if sum(xi <= knee for xi in x) < 3 or sum(xi > knee for xi in x) < min_beyond:
            continue
        p = _wls3([[1.0] * len(x), [min(xi, knee) for xi in x], [max(xi - knee, 0.0) for xi in x]], t)
        if p is None or p[0] < 0 or p[1] <= 0 or p[2] < p[1]:
            continue
        cand = KneeFit(p[0], p[1], p[2], knee, 0.0, len(x))
        rms = rms_rel_residual([cand.predict_s(xi) for xi in x], t)
        if rms < best.rms_rel_residual:
            best = KneeFit(p[0], p[1], p[2], knee, rms, len(x))
    return best


@dataclass(frozen=True, slots=True)
class MatrixRamp:
    """GEMM ramp: asymptotic rate and the size at which half of it is attained."""

    rate_flop_per_s: float
    half_flop: float
    fit: LineFit
    floor_points: int = 0
    """Leading (smallest) points left out as bound by a fixed floor (`floor_bound_points`)."""


FLOOR_RATIO = 1.5
"""A point whose time is within this factor of the shortest measured time runs at the floor, not the ramp."""


def floor_bound_points(flop: Sequence[float], time_s: Sequence[float], ratio: float = FLOOR_RATIO) -> int:
    """How many of the smallest points (by FLOPs) take no longer than `ratio` × the shortest time. For GEMMs
    issued one by one from the host those sizes are bound by the host's launch interval, a floor under which the
    GPU's time is hidden (t = max(launch, kernel)), and the ramp t = F½/R∞ + F/R∞ fitted through them reads the
    floor as F½ and tilts R∞ above every measured rate (a PyTorch probe of an H200: sizes 256–2,048 all at 18–24 µs,
    R∞ fitted 0.90 of peak against 0.77 at best; benchmarks/data/h200/probe_compute.json). Only for such timings:
    a GPU's own fixed cost per kernel (graph replays) is the ramp's F½ itself (`fit_matrix_ramp`'s `floor`). Left
    out only while three points stay."""
    if not flop:
        return 0
    order = sorted(range(len(flop)), key=lambda i: flop[i])
    shortest = min(time_s)
    n = 0
    for i in order:
        if time_s[i] > ratio * shortest:
            break
        n += 1
    return n if n >= 2 and len(flop) - n >= 3 else 0


def fit_matrix_ramp(flop: Sequence[float], rate_flop_per_s: Sequence[float], *, floor: bool = False) -> MatrixRamp:
    """R∞ and F½ from (GEMM FLOPs, attained FLOP/s) points; with `floor` (GEMMs timed as host launches) the
    floor-bound smallest ones left out (`floor_bound_points`); one point gives R∞ = its rate and F½ = 0."""
    t = [f / r for f, r in zip(flop, rate_flop_per_s)]
    drop = floor_bound_points(flop, t) if floor else 0
    keep = sorted(range(len(flop)), key=lambda i: flop[i])[drop:]
    line = fit_line_rel([flop[i] for i in keep], [t[i] for i in keep])
    rate = 1.0 / line.slope_s_per_unit if line.slope_s_per_unit > 0 else max(rate_flop_per_s[i] for i in keep)
    return MatrixRamp(rate, line.intercept_s * rate, line, drop)
