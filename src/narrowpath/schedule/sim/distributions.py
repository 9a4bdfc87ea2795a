"""Per-kernel noise, summed over the kernels between two sync points, and its maximum over a group.

A kernel's time is its nominal time × Y, Y independent with mean 1 and coefficient of variation c:
- normal: Y = 1 + c·Z;
- lognormal: ln Y ~ N(−σ²/2, σ²), σ² = ln(1 + c²);
- pareto (shifted): Y = a + b·P with P ~ Pareto(α, 1) (P(P > x) = x^−α), b = c / sd(P), a = 1 − b·E[P]; a
  right tail of index α, slightly faster than nominal most of the time.
A segment of n equal kernels takes d·S with S = ΣY/n; thousands of kernels cannot be drawn one by one, so S is
drawn from its distribution:
- normal: exact, S = 1 + (c/√n)·Z;
- lognormal: Fenton–Wilkinson (Fenton, IRE Trans. Commun. Syst. 1960): S ≈ lognormal with S's exact mean and
  variance; tested against direct sums (`tests/schedule/sim/test_distributions.py`);
- pareto: one big jump. Given the largest of the n factors, M (drawn exactly: P_max = (1 − U^{1/n})^{−1/α}), the
  other n − 1 are independent draws of Y conditioned on Y ≤ M, whose sum is drawn from a normal with the
  truncated Pareto's exact mean and variance. Mean and variance of S are exact and the tail is the largest
  term's (subexponential laws: P(ΣY > x) ~ n·P(Y > x)); only the bulk's shape is approximated. A fractional n
  (kernels shared between segments) sums round(n) and scales the spread by √(round(n)/n).
The maximum of g members' segment times (a collective waits for the last) is drawn per member and maxed, or, to
fold a run of segments at 16k ranks, replaced by a normal with the exact mean and variance of the sum of the
maxima (`max_moments`, numerical integration; a central-limit step over the run, tested against the exact draw).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from narrowpath.spec.noise import Jitter

_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
      -3.066479806614716e+01, 2.506628277459239e+00)
_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
      -1.328068155288572e+01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
      4.374664141464968e+00, 2.938163982698783e+00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)


def ndtri(p: np.ndarray) -> np.ndarray:
    """Inverse of the standard normal CDF, vectorised (Acklam's rational approximation, relative error < 1.2e-9;
    P. J. Acklam, 'An algorithm for computing the inverse normal cumulative distribution function', 2003)."""
    p = np.clip(np.asarray(p, dtype=float), 1e-300, 1 - 1e-16)
    out = np.empty_like(p)
    lo, hi = p < 0.02425, p > 1 - 0.02425
    mid = ~(lo | hi)
    q = p[mid] - 0.5
    r = q * q
    out[mid] = (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]) * q / \
        (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1)
    for sel, sign, pp in ((lo, 1.0, p[lo]), (hi, -1.0, 1 - p[hi])):
        q = np.sqrt(-2 * np.log(pp))
        out[sel] = sign * (((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]) / \
            ((((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1)
    return out


@lru_cache(maxsize=64)
def _max_density(g: int) -> tuple[np.ndarray, np.ndarray]:
    """(z grid, weights) such that Σ w·h(z) = E[h(max of g standard normals)] (trapezoid on [−9, 9])."""
    z = np.linspace(-9.0, 9.0, 6001)
    cdf = np.array([0.5 * math.erfc(-x / math.sqrt(2.0)) for x in z])
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    dens = g * pdf * cdf ** (g - 1)
    w = dens * (z[1] - z[0])
    w[0] *= 0.5
    w[-1] *= 0.5
    return z, w / w.sum()


def pareto_coefficients(cv: float, alpha: float) -> tuple[float, float]:
    """(a, b) of Y = a + b·P with mean 1 and coefficient of variation cv."""
    mean_p = alpha / (alpha - 1)
    sd_p = math.sqrt(alpha / ((alpha - 1) ** 2 * (alpha - 2)))
    b = cv / sd_p
    return 1.0 - b * mean_p, b


class KernelNoise:
    """Samplers of segment sums for one jitter spec (see module docstring)."""

    def __init__(self, jitter: Jitter):
        self.jitter = jitter
        self.light = jitter.dist in ("normal", "lognormal")
        if jitter.dist == "pareto":
            self.a, self.b = pareto_coefficients(jitter.cv, jitter.alpha)

    def _lognormal(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s2 = np.log1p(self.jitter.cv ** 2 / n)
        return -0.5 * s2, np.sqrt(s2)

    def factor(self, rng: np.random.Generator, n, size) -> np.ndarray:
        """S = (Σ of n kernel factors)/n, shape `size` (n broadcasts against it)."""
        n = np.maximum(1.0, np.asarray(n, dtype=float))
        c = self.jitter.cv
        if self.jitter.dist == "normal":
            return 1.0 + (c / np.sqrt(n)) * rng.standard_normal(size)
        if self.jitter.dist == "lognormal":
            mu, s = self._lognormal(n)
            return np.exp(mu + s * rng.standard_normal(size))
        # a fractional count (a kernel shared between segments) sums round(n) kernels, its spread scaled to n's:
        # mean 1 and variance c²/n exact, the largest term's tail kept
        n_int = np.maximum(1.0, np.round(n))
        return 1.0 + (self._pareto_sum(rng, n_int, size) / n_int - 1.0) * np.sqrt(n_int / n)

    def _pareto_sum(self, rng: np.random.Generator, n_int: np.ndarray, size) -> np.ndarray:
        """Σ of `n_int` (whole) shifted-Pareto kernel factors: the largest drawn exactly, the rest a normal with the
        truncated law's mean and variance (module docstring)."""
        al = self.jitter.alpha
        u = rng.random(size)
        p_max = np.exp(-np.log(-np.expm1(np.log(np.maximum(u, 1e-300)) / n_int)) / al)
        trunc = 1.0 - p_max ** -al
        safe = np.maximum(trunc, 1e-300)
        m1 = al / (al - 1) * (1.0 - p_max ** (1 - al)) / safe
        m2 = al / (al - 2) * (1.0 - p_max ** (2 - al)) / safe
        var = np.maximum(0.0, m2 - m1 * m1)
        rest = n_int - 1
        bulk = rest * np.where(trunc > 0, m1, 1.0) + np.sqrt(rest * var) * rng.standard_normal(size)
        return n_int * self.a + self.b * (p_max + bulk)

    def max_moments(self, n: float, g: int) -> tuple[float, float]:
        """(mean, variance) of the largest of g independent segment factors S of n kernels (light tails only)."""
        z, w = _max_density(max(1, g))
        if self.jitter.dist == "normal":
            s = self.jitter.cv / math.sqrt(max(1.0, n))
            vals = 1.0 + s * z
        else:
            mu, s = self._lognormal(np.asarray(max(1.0, n)))
            vals = np.exp(float(mu) + float(s) * z)
        mean = float((w * vals).sum())
        return mean, float((w * (vals - mean) ** 2).sum())

    def group_max(self, rng: np.random.Generator, n: float, groups: int, g: int) -> np.ndarray:
        """Largest of g independent factors S, for each of `groups` groups (drawn member by member)."""
        return self.factor(rng, n, (groups, g)).max(axis=1)
