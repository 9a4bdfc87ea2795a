"""AnalysisOptions refuses values the accounts cannot use, naming the field (API route; the CLI names flags)."""
from __future__ import annotations

import math

import pytest

from narrowpath.analysis.options import AnalysisOptions
from narrowpath.errors import SpecError


@pytest.mark.parametrize("field,value", [
    ("jitter_cv", math.nan), ("jitter_cv", 2.0), ("jitter_cv", -0.1), ("slow_node_fraction", math.inf),
    ("failures_per_gpu_hour", -1.0), ("failures_per_gpu_hour", math.inf), ("compression_ratio", 0.5),
    ("compression_ratio", math.nan), ("restart_s", -5.0), ("sram_usable_fraction", 1.5),
    ("storage_bw_bytes_per_s", 0.0), ("jitter_method", "exact"), ("seed", -1), ("num_samples", 0),
    ("sweep_factors", ()), ("sweep_factors", (1.0, math.nan)),
])
def test_bad_option_names_the_field(field, value):
    with pytest.raises(SpecError, match=f"options.{field}"):
        AnalysisOptions(**{field: value})


def test_defaults_are_valid():
    AnalysisOptions()
    AnalysisOptions(jitter_cv=0.0, failures_per_gpu_hour=0.0, jitter_method="sampled", seed=3)
