"""What GPT-OSS's expert path in Megatron-Core would add to the corpus's GPT-OSS predictions, priced at the model's own
rates — a diagnostic, not part of `validate`, nothing fitted; the corpus states neither the clamped GLU nor the
expert biases, so the model does not price them (docs/model.md, "What the MoE residuals are not").

The path, read from the source (Megatron-LM megatron/core/fusions/fused_bias_geglu.py `weighted_bias_quick_geglu_impl`
and megatron/core/transformer/moe/experts.py `TEGroupedMLP`; twenty-ninth and thirty-fourth sessions), per MoE layer
and micro-batch on R routed rows, expert inner size F, hidden H, E local experts, 16-bit activations (A bytes):
- the clamp: the [R, 2F] up-projection output split, both halves clamped, concatenated again — forward reads and
  writes 2RF twice (two clamps of RF in and out, one cat of 2RF in and out: 8RF·A), 3 kernels; backward masks the
  two halves' gradients and concatenates them (~10RF·A), ~4 kernels; again under `moe_act` recompute;
- the offset scalar built with `torch.tensor(linear_offset, device=...)` on every call: a blocking host-to-device
  copy, one host synchronisation per forward call (and per recompute), priced at the profile's `host_sync_s`;
- the second layer's bias added per local expert in Python (`_apply_bias`: split, b·p and t + b·p per expert, cat):
  forward ~6RH·A over 2E + 1 kernels, backward ~6RH·A over ~4E + 1 kernels (the bias and probability gradients);
  the first layer's bias gradient reduced from a whole [R, 2F] tensor (2RF·A read).
Bytes are priced as element-wise kernels (cost.roofline at HBM); the kernels' host issue time is printed apart, as
an upper bound of what would be exposed (only where the host falls behind the GPU).

    python benchmarks/gptoss_path_estimate.py [--corpus ../shared/validation/training-sweeps-public.yaml]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from narrowpath.cost.power import capped_device
from narrowpath.cost.roofline import op_time_s
from narrowpath.schedule.step import predict
from narrowpath.validate.corpus import load_corpus
from narrowpath.workload.moe import expert_rows
from narrowpath.workload.ops import vector
from narrowpath.workload.split import plan_layer_ranges

A = 2.0
"""Bytes of a 16-bit activation (the BF16 runs)."""


def path_extra_s(pr) -> tuple[float, float, int]:
    """(GPU time the path adds to the busiest stage's step, host issue time of its kernels, host syncs), per step."""
    scn = pr.scenario
    model, plan, cal = scn.model, scn.plan, pr.calibration
    dev = capped_device(scn.system)
    moe = model.moe
    R = expert_rows(model, plan)
    F = moe.expert_ffn / plan.expert_tp
    H = model.hidden
    E = max(1, moe.num_experts // plan.ep)
    recompute = plan.recompute == "selective" and "moe_act" in plan.recompute_modules
    ops = [vector("clamp", "fwd", 8 * R * F * A, "bf16", kernels=3),
           vector("clamp.bwd", "bwd", 10 * R * F * A, "bf16", kernels=4),
           vector("fc2_bias", "fwd", 6 * R * H * A, "bf16", kernels=2 * E + 1),
           vector("fc2_bias.bwd", "bwd", 6 * R * H * A, "bf16", kernels=4 * E + 1),
           vector("fc1_bias_grad", "bwd", 2 * R * F * A, "bf16", kernels=1)]
    if recompute:
        ops.append(vector("clamp.recompute", "recompute", 8 * R * F * A, "bf16", kernels=3))
    syncs = 2 if recompute else 1
    layers = max(sum(1 for r in stage for i in r if model.is_moe_layer(i)) for stage in plan_layer_ranges(model, plan))
    per = sum(op_time_s(op, dev, cal) for op in ops) + syncs * cal.host_sync_s
    host = sum(op.kernels for op in ops) * cal.host_dispatch_s
    m = pr.workload.num_microbatches
    return per * layers * m, host * layers * m, syncs * layers * m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "validation"
                                            / "training-sweeps-public.yaml"))
    args = ap.parse_args()
    closed, before, after = [], [], []
    for case in load_corpus(args.corpus):
        if "gpt-oss" not in case.id:
            continue
        pr = predict(case.scenario)
        meas = case.measured_step_time_s
        extra, host, syncs = path_extra_s(pr)
        gap = meas - pr.step_time_s
        closed.append(extra / gap if gap > 0 else float("nan"))
        before.append(abs(pr.step_time_s / meas - 1))
        after.append(abs((pr.step_time_s + extra) / meas - 1))
        print(f"{case.id:70s} predicted {pr.step_time_s:6.2f} s measured {meas:6.2f} s ({pr.step_time_s / meas - 1:+6.1%})"
              f" | path +{extra:5.2f} s ({syncs} syncs; kernels' host issue {host:4.2f} s) -> "
              f"{(pr.step_time_s + extra) / meas - 1:+6.1%}")
    share = sorted(c for c in closed if c == c and c <= 1.0)
    print(f"{len(closed)} GPT-OSS cases: mean |error| {sum(before) / len(before):.1%} as priced, "
          f"{sum(after) / len(after):.1%} with the path; of the cases still too fast after it, the path is "
          f"{share[0]:.0%} … {share[-1]:.0%} of the gap (median {share[len(share) // 2]:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
