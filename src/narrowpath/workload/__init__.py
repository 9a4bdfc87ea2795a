"""workload: what must happen on each rank — Ops, Transfers and Residency. No timing here."""
from narrowpath.workload.build import build_workload
from narrowpath.workload.counts import active_parameter_count, parameter_count
from narrowpath.workload.items import Op, Residency, StageWork, Transfer, Workload

__all__ = ["build_workload", "parameter_count", "active_parameter_count", "Op", "Residency", "StageWork",
           "Transfer", "Workload"]
