"""Held out: Megatron-LM's own MoE training recipes (github NVIDIA/Megatron-LM examples/moe_recipes, 2026) — nothing
fitted to them, no corpus case from them.

Eleven recipes of Qwen3-30B-A3B and Qwen3-235B-A22B on GB200 / GB300 NVL72, B300, B200 and H100, each a YAML of
Megatron-LM arguments: nine with the throughput pull request #5728 measured for them ("docs: refresh Qwen3 MoE recipe
performance", median model TFLOP/s per GPU over steady-state iterations 30-45) and the figure each replaced
(`earlier_model_tflops_per_gpu`), two (Qwen3-235B on B300 and B200) with the figure pull request #5289 gives.
benchmarks/data/heldout-moe-recipes.yaml holds them as training cases; each one's `assumed` says how an argument
became a plan knob. The step time is the recipe's tokens times Megatron-LM's own FLOPs per token over the
measured rate: `megatron_lm_flop_per_token` (megatron/training/training.py `transformer_flops`: causal attention,
the padded vocabulary), which this script recomputes for every case.

Beside each case's error, the script compares the recipes that differ in one respect, as ratios of their step
times (which cancel the FLOP convention): full against partial CUDA graphs (`full_iteration` with the paged stash
and the fused grouped MLP, against attention, router and dispatcher preprocessing captured), MXFP8 with partial
graphs against eager BF16, blockwise FP8 against BF16 on H100, GB300 against GB200. The two measurements of each
recipe give the spread a model cannot beat (up to 41 % apart on the H100 Qwen3-235B recipe).

    python benchmarks/heldout_moe_recipes.py [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DATA = ROOT / "benchmarks" / "data" / "heldout-moe-recipes.yaml"

PAIRS = (
    ("full against partial CUDA graphs, Qwen3-30B GB200 MXFP8", "mlm-qwen3-30b-gb200-mxfp8-ep16-full-cg",
     "mlm-qwen3-30b-gb200-mxfp8-ep16-partial-cg"),
    ("full against partial CUDA graphs, Qwen3-235B GB200 MXFP8", "mlm-qwen3-235b-gb200-mxfp8-ep64-full-cg",
     "mlm-qwen3-235b-gb200-mxfp8-ep64-partial-cg"),
    ("MXFP8 (partial graphs) against eager BF16, Qwen3-30B GB200", "mlm-qwen3-30b-gb200-mxfp8-ep16-partial-cg",
     "mlm-qwen3-30b-gb200-bf16-ep16"),
    ("blockwise FP8 (partial graphs) against BF16, Qwen3-30B H100", "mlm-qwen3-30b-h100-fp8-ep8-partial-cg",
     "mlm-qwen3-30b-h100-bf16-ep8"),
    ("GB300 against GB200, Qwen3-235B full graphs", "mlm-qwen3-235b-gb300-mxfp8-ep64-full-cg",
     "mlm-qwen3-235b-gb200-mxfp8-ep64-full-cg"),
)
"""(what, variant, baseline): each pair differs in what its name says (and, for the graph pairs, in the fused grouped
MLP that comes with the paged stash); its ratio is the baseline's step time over the variant's — above 1 where the
variant is faster."""


def megatron_lm_flop_per_token(model: dict) -> float:
    """FLOPs per trained token as Megatron-LM logs them (megatron/training/training.py `transformer_flops`, GQA
    branch, every layer an MoE layer, no shared expert, no MTP): 3 (forward, dgrad, wgrad) × 2 (multiply-add) ×
    [layers × (h·(q + 2·kv) for QKV + q·s/2·2 for the causal half of QKᵀ and PV + q·h for the output projection
    + h·f·k·3 for the k routed SwiGLU experts) + h·V for the logits], q = heads·head_dim, kv = kv_heads·head_dim."""
    if model.get("shared_experts") or model.get("mtp_layers") or model.get("dense_layers"):
        raise ValueError("megatron_lm_flop_per_token: routed-expert layers only (no shared expert, dense layer or MTP)")
    h, s = model["hidden"], model["seq_len"]
    q, kv = model["heads"] * model["head_dim"], model["kv_heads"] * model["head_dim"]
    attention = h * (q + 2 * kv) + q * s / 2 * 2 + q * h
    experts = h * model["ffn"] * model["top_k"] * 3
    return 6.0 * (model["layers"] * (attention + experts) + h * model["vocab"])


def step_time_s(case: dict, tflops_per_gpu: float) -> float:
    """Step time of a recipe at a measured model TFLOP/s per GPU: its global batch's tokens × FLOPs per token over
    the aggregate rate."""
    plan, model = case["plan"], case["model"]
    tokens = plan["gbs"] * model["seq_len"]
    return tokens * megatron_lm_flop_per_token(model) / (tflops_per_gpu * 1e12 * case["hardware"]["num_gpus"])


def load(path: Path = DATA) -> list[dict]:
    """The held-out cases as written (their `measured` throughput included)."""
    return yaml.safe_load(path.read_text())["cases"]


def priced(report, cases: dict[str, dict]) -> dict[str, dict]:
    """Every case of `report` (`validate` on the file) beside its measurement and, where #5728 gives it, the earlier
    one (`cases`: the file's cases by id)."""
    rows = {}
    for r in report.cases:
        m = cases[r.id]["measured"]
        earlier = m.get("earlier_model_tflops_per_gpu")
        rows[r.id] = {"case": r.id, "predicted_s": r.predicted_step_time_s, "measured_s": r.measured_step_time_s,
                      "error": r.error, "failure": r.failure,
                      "earlier_s": step_time_s(cases[r.id], earlier) if earlier else None}
    return rows


def pair_ratios(rows: dict[str, dict]) -> list[dict]:
    """Baseline over variant step time of each pair (PAIRS), predicted, measured and (where both have one) earlier."""
    out = []
    for what, variant, baseline in PAIRS:
        a, b = rows[variant], rows[baseline]
        if a["failure"] or b["failure"]:
            continue
        earlier = b["earlier_s"] / a["earlier_s"] if a["earlier_s"] and b["earlier_s"] else None
        out.append({"pair": what, "variant": variant, "baseline": baseline,
                    "predicted": b["predicted_s"] / a["predicted_s"], "measured": b["measured_s"] / a["measured_s"],
                    "earlier": earlier})
    return out


def run(path: Path = DATA) -> dict:
    """The cases, the pairs and the mean and worst |error| of the priced cases (the validation report's)."""
    from narrowpath.validate.run import run_validation
    report = run_validation(path)
    rows = priced(report, {c["id"]: c for c in load(path)})
    return {"cases": list(rows.values()), "pairs": pair_ratios(rows), "mean_abs_error": report.mean_abs_error,
            "max_abs_error": report.max_abs_error}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    out = run()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{'recipe':44s} {'predicted':>9s} {'measured':>9s} {'error':>7s} {'earlier':>9s}")
    for r in out["cases"]:
        if r["failure"]:
            print(f"{r['case']:44s} not priced: {r['failure']}")
            continue
        earlier = f"{r['earlier_s']:8.2f}s" if r["earlier_s"] else "        —"
        print(f"{r['case']:44s} {r['predicted_s']:8.2f}s {r['measured_s']:8.2f}s {r['error'] * 100:+6.1f}% {earlier}")
    print(f"mean |error| {out['mean_abs_error'] * 100:.1f} %, worst {out['max_abs_error'] * 100:.1f} %")
    print(f"\n{'baseline / variant step time':62s} {'predicted':>9s} {'measured':>9s} {'earlier':>8s}")
    for p in out["pairs"]:
        earlier = f"{p['earlier']:8.3f}" if p["earlier"] else "       —"
        print(f"{p['pair']:62s} {p['predicted']:9.3f} {p['measured']:9.3f} {earlier}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
