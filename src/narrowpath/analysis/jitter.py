"""Expected wait for the slowest of N participants under per-rank jitter.

Model: each rank's compute time between two sync points is T + σ·Z with Z ~ N(0, 1) i.i.d. (σ = cv·T); the
group waits for the slowest, i.e. σ·E[max of N standard normals] beyond the mean.
Closed form: exact values for N ≤ 5 (N = 2: 1/√π; N = 3: 3/(2√π); Harter, 'Expected values of normal order
statistics', Biometrika 1961), else Blom's plotting position, E[Z_(N)] ≈ Φ⁻¹((N − 0.375)/(N + 0.25)) (Blom,
'Statistical estimates and transformed beta-variables', 1958), within ~1 % for N > 5; for large N it tends to the Gumbel
extreme-value law, E ≈ b_N + γ·a_N with a_N = 1/√(2 ln N), b_N = √(2 ln N) − (ln ln N + ln 4π)/(2√(2 ln N))
(Gumbel, 'Statistics of Extremes', 1958; Cramér 1946 §28.6).
Sampled: seeded Monte Carlo with a numpy Generator.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

EULER_GAMMA = 0.5772156649015329
EXACT_MAX = {2: 0.5641895835, 3: 0.8462843753, 4: 1.0293753730, 5: 1.1629644736}
"""E[max of N standard normals], Harter 1961 table."""


def expected_max_normal_blom(n: int) -> float:
    """E[max of n i.i.d. N(0,1)]: exact for n ≤ 5, Blom 1958 above (0 for n ≤ 1)."""
    if n <= 1:
        return 0.0
    if n in EXACT_MAX:
        return EXACT_MAX[n]
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def expected_max_normal_gumbel(n: int) -> float:
    """E[max of n i.i.d. N(0,1)], Gumbel asymptotic form (large n)."""
    if n <= 1:
        return 0.0
    two_ln = 2.0 * math.log(n)
    if n < 3:
        return expected_max_normal_blom(n)
    a = 1.0 / math.sqrt(two_ln)
    b = math.sqrt(two_ln) - (math.log(math.log(n)) + math.log(4.0 * math.pi)) / (2.0 * math.sqrt(two_ln))
    return b + EULER_GAMMA * a


def expected_max_normal_sampled(n: int, rng: np.random.Generator, num_samples: int = 2000) -> float:
    """E[max of n i.i.d. N(0,1)] by seeded Monte Carlo (chunks keep memory bounded)."""
    if n <= 1:
        return 0.0
    chunk = max(1, min(num_samples, int(2e6 // n)))
    acc, done = 0.0, 0
    while done < num_samples:
        k = min(chunk, num_samples - done)
        acc += rng.standard_normal((k, n)).max(axis=1).sum()
        done += k
    return acc / num_samples


def expected_wait_s(sigma_s: float, n: int, method: str = "closed_form", rng: np.random.Generator | None = None,
                    num_samples: int = 2000) -> float:
    """Expected extra time a sync point of n ranks costs: σ·E[max of n standard normals]."""
    if method == "sampled":
        return sigma_s * expected_max_normal_sampled(n, rng or np.random.default_rng(0), num_samples)
    return sigma_s * expected_max_normal_blom(n)
