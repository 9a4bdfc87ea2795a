"""Stacked LSTM (GNMT-style) training work on one rank: the recurrent case of the distance budget.

Per layer and time step: one GEMM [b × 2h]·[2h × 4h] (input and recurrent weights fused, Appleyard et al.
2016 'Optimizing performance of recurrent neural networks on GPUs') and the gate element-wise kernel.
The same weights are re-read every time step; whether they can stay on chip is what the persistent-RNN
technique (Diamos et al., ICML 2016) exploits — the analysis stage reasons about it from `weight_bytes`.
"""
from __future__ import annotations

import dataclasses

from narrowpath.spec.scenario import Scenario
from narrowpath.workload import transformer as T
from narrowpath.workload.items import Op, StageWork, Transfer, Workload


def lstm_step_ops(hidden: int, batch: int, tp: int, precision: str) -> list[Op]:
    """Forward ops of one LSTM layer for one time step."""
    A = 4 if precision == "fp32" else 2
    h = hidden
    gemm = T.gemm("lstm_gates", "fwd", batch, 2 * h, 4 * h / tp, precision, A, A)
    cell = T.vector("lstm_cell", "fwd", (4 + 1 + 2) * batch * h / tp * A, precision)
    return [gemm, cell]


def build_lstm_workload(scn: Scenario) -> Workload:
    model, plan = scn.model, scn.plan
    b, s, h, V = plan.mbs, model.seq_len, model.hidden, model.vocab
    steps = s * model.layers
    # cuDNN runs the time loop inside one library call: its per-step kernels are not issued by the framework
    fwd = [dataclasses.replace(op, host_kernels=0) for op in lstm_step_ops(h, b, plan.tp, plan.precision)]
    bwd = [dataclasses.replace(op, host_kernels=0) for op in T.backward_ops(fwd)]
    ops = [(op, float(steps)) for op in fwd] + [(op, float(steps)) for op in bwd]
    A = 4 if plan.precision == "fp32" else 2
    logits = T.gemm("logits", "fwd", b * s, h, V / plan.tp, plan.precision, A, A)
    ops += [(logits, 1.0)] + [(op, 1.0) for op in T.backward_ops([logits])]
    ops.append((T.vector("cross_entropy", "fwd", 16 * b * s * V / plan.tp, "fp32", 4), 1.0))
    ops.append((T.vector("cross_entropy", "bwd", 12 * b * s * V / plan.tp, "fp32", 2), 1.0))
    xf: list[tuple[Transfer, float]] = []
    if plan.tp > 1:
        xf.append((Transfer("tp.gates_all_gather", "all_gather", "tp", b * 4 * h * A, "fwd", False), float(steps)))
        xf.append((Transfer("tp.gates_all_gather", "all_gather", "tp", b * 4 * h * A, "bwd", False), float(steps)))
    params = model.layers * (8 * h * h + 8 * h) / plan.tp + 2 * V * h / plan.tp
    stage = StageWork(0, model.layers, tuple(ops), tuple(xf), params)
    G = 2 if plan.precision == "fp16" else 4
    step_xf = []
    if plan.dp > 1:
        step_xf.append((Transfer("dp.grad_all_reduce", "all_reduce", "dp", params * G, "step", plan.dp_overlap), 1.0))
    opt = Op("adam", "vector", "optimizer", 0.0, params * (G + 12 + 12 + 2 + G), "fp32", 3)
    useful = 3.0 * sum(op.flop * c for op, c in ops if op.phase == "fwd" and op.kind == "matrix") \
        * plan.tp * plan.dp * plan.num_microbatches
    from narrowpath.workload.counts import parameter_count
    return Workload((stage,), tuple(step_xf), ((opt, 1.0),), plan.num_microbatches, plan.gbs * s, useful,
                    parameter_count(model), ("lstm: weights re-read from HBM every time step",))
