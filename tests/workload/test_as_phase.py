"""A re-run op (recompute) is the same work in another phase: everything that prices it carries over, only what it
keeps for backward does not."""
from __future__ import annotations

import dataclasses

from narrowpath.workload.items import Op
from narrowpath.workload.ops import as_phase


def test_a_recomputed_op_keeps_its_pricing_fields():
    op = Op("x", "vector", "fwd", 0.0, 1e6, "bf16", 3, 0.0, groups=2, saved_bytes=5e5, transpose_bytes=1e5,
            host_kernels=0, host_syncs=1, rows=640.0, exps=1e5, head_dim=96.0)
    (again,) = as_phase([op], "recompute")
    assert again.phase == "recompute" and again.saved_bytes == 0.0
    same = {f.name for f in dataclasses.fields(Op)} - {"phase", "saved_bytes", "grad_elements", "grad_gathered"}
    assert {f: getattr(again, f) for f in same} == {f: getattr(op, f) for f in same}
