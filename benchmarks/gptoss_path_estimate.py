"""The corpus's GPT-OSS-120B cases priced as stated and with the architecture the corpus cannot state — the experts'
clamped, offset GLU (`moe.glu_clamp` 7.0) and their biases (`moe.expert_bias`), as the catalog's `gpt-oss-120b`
has them — a diagnostic, not part of `validate`, nothing fitted.

With them the model prices Megatron-Core's path for that architecture (workload.moe.expert_path_ops: the clamp's
passes and the host synchronisation of its per-call offset tensor, the per-expert bias loop; their backward and
`moe_act` recompute as the workload's rules give them). The corpus's model blocks state `ffn_act: swiglu` and no
biases (shared/validation/README.md has no field for either), so `validate` prices a plain GLU without biases.

    python benchmarks/gptoss_path_estimate.py [--corpus ../shared/validation/training-sweeps-public.yaml]
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from narrowpath.catalog import model as catalog_model
from narrowpath.schedule.step import predict
from narrowpath.validate.corpus import load_corpus


def with_gptoss_path(scn):
    """The scenario with the catalog gpt-oss-120b's clamp and expert biases in its MoE block."""
    ref = catalog_model("gpt-oss-120b").moe
    moe = dataclasses.replace(scn.model.moe, glu_clamp=ref.glu_clamp, expert_bias=ref.expert_bias)
    return dataclasses.replace(scn, model=dataclasses.replace(scn.model, moe=moe))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "validation"
                                            / "training-sweeps-public.yaml"))
    args = ap.parse_args()
    before, after = [], []
    for case in load_corpus(args.corpus):
        if "gpt-oss" not in case.id:
            continue
        meas = case.measured_step_time_s
        a, b = predict(case.scenario), predict(with_gptoss_path(case.scenario))
        before.append(a.step_time_s / meas - 1)
        after.append(b.step_time_s / meas - 1)
        rc = dict(b.scenario.chosen).get("recompute", "").split(" — ")[0]
        print(f"{case.id:70s} measured {meas:6.2f} s | stated {a.step_time_s:6.2f} s ({before[-1]:+6.1%}) | with the "
              f"path {b.step_time_s:6.2f} s ({after[-1]:+6.1%}) {rc}")
    print(f"{len(before)} GPT-OSS cases: mean |error| {sum(map(abs, before)) / len(before):.1%} as stated, "
          f"{sum(map(abs, after)) / len(after):.1%} with the clamped GLU and expert biases priced")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
