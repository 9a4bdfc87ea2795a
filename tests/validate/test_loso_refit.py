"""benchmarks/loso_refit.py's folds price a held-out source's cases with nothing fitted on that source (fifty-sixth
session's review: GB300's 52 cases, all Megatron-Bridge runs, kept their shipped constants — fitted on them — and
counted as out-of-fold; B300's were never refitted because the extends chain was read where it had been dropped)."""
from __future__ import annotations

from narrowpath.catalog import calibration_for

from tests.validate.benchmark_module import load_benchmark

L = load_benchmark("loso_refit")


class _Case:
    def __init__(self, precision: str, moe: bool = False):
        plan = type("P", (), {"precision": precision})()
        model = type("M", (), {"moe": object() if moe else None})()
        self.scenario = type("S", (), {"plan": plan, "model": model})()


def test_a_device_takes_the_fitted_constants_of_its_extends_chain():
    assert [L.root_device(d) for d in ("B300", "H100-SXM5-96GB-HBM2e", "A100-SXM4-40GB", "GB300", "B200")] == \
        ["B200", "H100-SXM5-80GB", "A100-SXM4-80GB", "GB300", "B200"]


def test_the_entries_a_fit_derives_from_data():
    """Dense cases' formats (fp16 counts as bf16 and writes fp16 too; nvfp4 writes fp4), the flash efficiency;
    MoE cases fit nothing."""
    assert L.data_keys([_Case("fp8"), _Case("bf16")]) == {"fp8", "bf16", "fp16", "flash"}
    assert L.data_keys([_Case("nvfp4"), _Case("mxfp8", moe=True)]) == {"nvfp4", "fp4", "flash"}
    assert L.data_keys([_Case("mxfp8", moe=True)]) == set()


def test_a_fold_drops_what_only_the_held_out_source_determined():
    """GB300 priced with GB200's fold fit (fp8 0.45, flash 0.7) and its own shipped mxfp8 / nvfp4 / fp4 dropped:
    MXFP8 then reads the fold's fp8 (Calibration.matrix_eff: mxfp8 → fp8), not the shipped 0.60 fitted on the
    held-out runs; what no fit touched (bf16's prior) stays."""
    shipped = calibration_for("GB300")
    cal = L.fold_calibration("GB300", {"fp8": 0.45, "flash": 0.7}, {"fp8", "mxfp8", "nvfp4", "fp4", "flash"},
                             {"host_dispatch_s": shipped.host_dispatch_s, "host_sync_s": shipped.host_sync_s})
    assert cal.matrix_eff("fp8") == 0.45 and cal.matrix_eff("mxfp8") == 0.45 and cal.matrix_eff("nvfp4") == 0.45
    assert cal.flash_efficiency == 0.7
    assert cal.matrix_eff("bf16") == shipped.matrix_eff("bf16")
    assert L.PRIOR_DEVICE == {"GB300": "GB200"}
