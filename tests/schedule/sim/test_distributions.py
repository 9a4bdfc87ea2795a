"""Segment sums of per-kernel noise drawn from their distribution: exact for normal, Fenton–Wilkinson for
lognormal, one big jump for Pareto — each held against direct sums of kernel factors."""
from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from narrowpath.analysis.jitter import EXACT_MAX
from narrowpath.schedule.sim.distributions import KernelNoise, ndtri, pareto_coefficients
from narrowpath.spec.noise import Jitter


def direct(jitter: Jitter, n: int, size: int, rng) -> np.ndarray:
    """Mean of n kernel factors, drawn one by one."""
    c = jitter.cv
    if jitter.dist == "normal":
        y = 1 + c * rng.standard_normal((size, n))
    elif jitter.dist == "lognormal":
        s2 = np.log1p(c * c)
        y = np.exp(-s2 / 2 + np.sqrt(s2) * rng.standard_normal((size, n)))
    else:
        a, b = pareto_coefficients(c, jitter.alpha)
        y = a + b * rng.random((size, n)) ** (-1 / jitter.alpha)
    return y.mean(axis=1)


def test_ndtri_is_the_inverse_normal_cdf():
    p = np.array([1e-12, 1e-6, 0.01, 0.02425, 0.3, 0.5, 0.9, 0.97575, 0.999, 1 - 1e-9])
    ref = np.array([NormalDist().inv_cdf(x) for x in p])
    assert np.allclose(ndtri(p), ref, rtol=1e-8, atol=1e-8)


def test_kernel_factors_have_mean_one_and_the_given_cv():
    rng = np.random.default_rng(1)
    for dist in ("normal", "lognormal", "pareto"):
        j = Jitter(dist=dist, cv=0.1, alpha=3.5)
        y = direct(j, 1, 400_000, rng)
        assert y.mean() == pytest.approx(1.0, abs=2e-3)
        assert y.std() == pytest.approx(0.1, rel=0.05)


@pytest.mark.parametrize("dist,cv,alpha,n", [("normal", 0.05, 2.5, 50), ("lognormal", 0.2, 2.5, 20),
                                            ("lognormal", 0.05, 2.5, 400), ("pareto", 0.1, 2.5, 30),
                                            ("pareto", 0.3, 2.2, 200), ("pareto", 0.05, 3.0, 1000)])
def test_segment_sum_matches_direct_sums(dist, cv, alpha, n):
    """Mean 1 and sd cv/√n (exact by construction; Pareto's sample sd is noisy: its kurtosis is infinite below
    α = 4); p50 and p99 of the drawn factor match summing n kernels one by one; the Pareto tail (p99.9) within
    10 %: the largest term is drawn exactly, the bulk is normal."""
    rng = np.random.default_rng(2)
    j = Jitter(dist=dist, cv=cv, alpha=alpha)
    ref = direct(j, n, 40_000, rng)
    got = KernelNoise(j).factor(rng, n, 200_000)
    assert got.mean() == pytest.approx(1.0, abs=3 * cv / np.sqrt(n) / 400)
    if dist != "pareto" or alpha >= 2.5:  # below, a sample's sd misses the rare huge terms that make the variance
        assert got.std() == pytest.approx(cv / np.sqrt(n), rel=0.08 if dist == "pareto" else 0.01)
    for q, tol in ((50, 0.004), (99, 0.01)):
        assert np.percentile(got, q) - 1 == pytest.approx(np.percentile(ref, q) - 1, abs=tol * ref.std() * 10)
    if dist == "pareto":
        assert np.percentile(got, 99.9) - 1 == pytest.approx(np.percentile(ref, 99.9) - 1, rel=0.10)


@pytest.mark.parametrize("g", [2, 3, 4, 5, 8, 64])
def test_max_moments_match_monte_carlo(g):
    """E[max of g] of normal segments matches Harter's table; lognormal's mean and variance a Monte Carlo."""
    kn = KernelNoise(Jitter(dist="normal", cv=0.1))
    mean, var = kn.max_moments(1.0, g)
    if g in EXACT_MAX:
        assert (mean - 1) / 0.1 == pytest.approx(EXACT_MAX[g], rel=1e-4)
    rng = np.random.default_rng(3)
    sample = kn.group_max(rng, 1.0, 200_000, g)
    assert mean == pytest.approx(sample.mean(), abs=3 * sample.std() / 400)
    assert var == pytest.approx(sample.var(), rel=0.02)
    kl = KernelNoise(Jitter(dist="lognormal", cv=0.3))
    mean, var = kl.max_moments(4.0, g)
    sample = kl.group_max(rng, 4.0, 200_000, g)
    assert mean == pytest.approx(sample.mean(), rel=1e-3)
    assert var == pytest.approx(sample.var(), rel=0.03)


@pytest.mark.parametrize("dist", ["normal", "lognormal", "pareto"])
@pytest.mark.parametrize("n", [1.4, 1.6, 2.5, 37.3])
def test_fractional_kernel_counts_keep_mean_one_and_cv(dist, n):
    """A segment's kernel count is fractional where its kernels are shared between segments (kernels × share):
    the factor keeps mean 1 and sd cv/√n. (Pareto once divided a sum of round(n) kernels by n: mean round(n)/n,
    0.71 at n = 1.4, 1.25 at 1.6 — a bias the simulated wait then read as a heavy tail's effect.)"""
    cv = 0.05
    got = KernelNoise(Jitter(dist=dist, cv=cv, alpha=3.5)).factor(np.random.default_rng(4), n, 400_000)
    assert got.mean() == pytest.approx(1.0, abs=5e-4)
    assert got.std() == pytest.approx(cv / np.sqrt(n), rel=0.05)
