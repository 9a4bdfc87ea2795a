"""Checkpoint write and restore: the job's state through host memory, the front-end network and a storage system
that every writer shares.

- Bytes: 16-bit (or fp32) weights + fp32 master weights + two Adam moments (12 B/param; Rajbhandari et al. SC'20
  §3), the whole job's state once.
- Writers: the ranks holding a distinct part of it. With a sharded optimizer (ZeRO ≥ 1) every rank holds a
  distinct shard; without, the dp replicas hold copies and one replica's ranks write (PyTorch Distributed
  Checkpoint de-duplicates replicated tensors). Writers spread over the nodes.
- Serialisation: each writer stages its shard to host memory over its host link (PCIe / C2C,
  `System.host_bw_bytes_per_s_per_gpu`) before the file write (torch.distributed.checkpoint stages tensors to
  CPU), and on restore copies it back: shard bytes / host bandwidth.
- Transfer: all bytes through min(the storage system's bandwidth, the front-end NICs of the writers' nodes). The
  storage bandwidth is the cluster's per-GPU provisioning (catalog facility.yaml) × GPUs unless given.
- write = serialise + transfer (a blocking checkpoint; an asynchronous one hides the transfer, not the staging);
  restore = transfer at the read bandwidth + de-serialise.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.catalog.facility import Facility
from narrowpath.schedule.step import StepPrediction
from narrowpath.workload.build import optimizer_state_bytes_per_param, weight_bytes_per_param


@dataclass(frozen=True, slots=True)
class CheckpointCost:
    checkpoint_bytes: float
    writers: int
    bytes_per_writer: float
    storage_write_bw_bytes_per_s: float
    storage_read_bw_bytes_per_s: float
    front_end_bw_bytes_per_s: float
    """Front-end bandwidth of the nodes that hold writers, all together."""
    host_bw_bytes_per_s: float
    """Per-writer staging bandwidth (host link)."""
    serialise_s: float
    write_bw_bytes_per_s: float
    """What the transfer gets: min(storage write, front end)."""
    write_s: float
    restore_s: float
    bottleneck: str
    """`storage`, `front-end network` or `serialisation` — the largest part of the write."""


def checkpoint_bytes(params_total: float, plan) -> float:
    """16-bit (or fp32) weights + the optimizer state: fp32 master + two Adam moments (12 B/param; Rajbhandari et
    al. SC'20 §3), 8 with 16-bit moments (workload.build.optimizer_state_bytes_per_param)."""
    return params_total * (weight_bytes_per_param(plan.precision) + optimizer_state_bytes_per_param(plan))


def num_writers(pred: StepPrediction) -> int:
    """Ranks holding a distinct part of the state (module docstring)."""
    scn = pred.scenario
    replicas = 1 if scn.plan.zero_stage >= 1 else scn.plan.dp
    return max(1, scn.num_gpus // replicas)


def checkpoint_cost(pred: StepPrediction, facility: Facility, storage_write_bw_bytes_per_s: float | None = None
                    ) -> CheckpointCost:
    scn = pred.scenario
    system, n = scn.system, scn.num_gpus
    total = checkpoint_bytes(pred.workload.params_total, scn.plan)
    writers = num_writers(pred)
    per_writer = total / writers
    nodes = -(-n // system.gpus_per_node)
    fe_gpu = system.tier("front_end").bw_bytes_per_s_per_gpu if system.has_tier("front_end") else 0.0
    front_end = min(nodes, writers) * system.gpus_per_node * fe_gpu
    provisioned = facility.storage_write_bytes_per_s_per_gpu * n
    storage_w = storage_write_bw_bytes_per_s or provisioned
    storage_r = facility.storage_read_bytes_per_s_per_gpu * n * storage_w / provisioned  # a given write bw scales both
    host = system.host_bw_bytes_per_s_per_gpu or (system.device.level("host").bw_bytes_per_s
                                                  if system.device.has_level("host") else 0.0)
    serialise = per_writer / host if host > 0 else 0.0
    write_bw = min(storage_w, front_end) if front_end > 0 else storage_w
    read_bw = min(storage_r, front_end) if front_end > 0 else storage_r
    transfer = total / write_bw
    parts = {"serialisation": serialise, "storage" if storage_w <= front_end or front_end <= 0
             else "front-end network": transfer}
    return CheckpointCost(total, writers, per_writer, storage_w, storage_r, front_end, host, serialise, write_bw,
                          serialise + transfer, total / read_bw + serialise, max(parts, key=parts.get))
